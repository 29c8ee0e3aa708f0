"""What `macfleet export mlx-hostfile` says on stderr once the file is written."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text

from macfleet.judge.mlx import MlxHostfile
from macfleet.render.text import text


def hostfile_written(hostfile: MlxHostfile, path: Path) -> Text:
    return text(f"wrote {path}: {len(hostfile.hosts)} ranks, backend {hostfile.backend}; run it with "
                f"`mlx.launch --hostfile {path} -- …`")
