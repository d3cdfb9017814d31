"""Where one project environment keeps its state, run files and checkpoints on disk."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dsflow.adapters.state.local import LocalStateBackend
from dsflow.core.model import Project


@dataclass(frozen=True)
class Workspace:
    """Paths of one project environment."""

    root: Path
    state_dir: Path
    checkpoint_root: Path
    environment: str

    @classmethod
    def of(cls, project: Project) -> Workspace:
        root = Path(project.root)
        return cls(root=root, state_dir=root / project.state_path,
                   checkpoint_root=root / project.runtime.checkpoint_root / project.environment,
                   environment=project.environment)

    @property
    def run_dir(self) -> Path:
        return self.state_dir / "run" / self.environment

    def state_backend(self) -> LocalStateBackend:
        return LocalStateBackend(self.state_dir / "state", self.environment)

    def query_dir(self, name: str) -> Path:
        return self.run_dir / "queries" / name

    def datagen_dir(self, name: str) -> Path:
        return self.run_dir / "datagen" / name

    def checkpoint(self, name: str, version: str) -> Path:
        return self.checkpoint_root / name / version
