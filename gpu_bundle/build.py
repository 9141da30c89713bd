"""Build the GPU bundle: the covering combinations rendered, and a runner that needs no copier.

    nox -s gpu-bundle           # writes build/gpu-bundle/
    python build/gpu-bundle/run.py --out results

A GPU machine may lack copier and nox, and GPU time is short, so everything that needs them
happens here, on any machine; the bundle needs only Python, torch, numpy and pytest.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from combos import ALL_OFF, COVERING, DEFAULT, MOST, PACKAGE, SHORT_RUN, Combo, render  # noqa: E402

MAX_BYTES = 32 * 2**20


def build(dest: Path, rendered: Callable[[Combo], Path] | None = None) -> Path:
    """Render every covering combination into dest/projects/<id>, beside run.py; return dest.

    ``rendered`` (combo -> a render of it, the tests' shared one) is copied instead of
    rendering again."""
    if dest.exists():
        shutil.rmtree(dest)
    (dest / "projects").mkdir(parents=True)
    for combo in COVERING:
        if rendered is None:
            render(combo.answers, dest / "projects" / combo.id)
        else:
            shutil.copytree(rendered(combo), dest / "projects" / combo.id)
    manifest = {
        "package": PACKAGE,
        "short_run": SHORT_RUN,
        "default": DEFAULT.id,
        "sharded": MOST["sharding"].id,
        "off": ALL_OFF.id,
        "combos": [
            {"id": combo.id, **combo.toggles, "run_flags": combo.run_flags()} for combo in COVERING
        ],
    }
    (dest / "combos.json").write_text(json.dumps(manifest, indent=2) + "\n")
    for name in ["run.py", "measure.py"]:
        shutil.copy(HERE / name, dest / name)
    size = sum(path.stat().st_size for path in dest.rglob("*") if path.is_file())
    if size > MAX_BYTES:
        raise SystemExit(f"gpu-bundle: {size / 2**20:.1f} MiB, over the 32 MiB limit")
    return dest


if __name__ == "__main__":
    print(build(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE.parent / "build" / "gpu-bundle"))
