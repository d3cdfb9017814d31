"""Where one project environment keeps its state, run files and checkpoints on disk."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from dsflow.adapters.state import StateBackend, make_backend
from dsflow.core.model import Project, StateSettings


@dataclass(frozen=True)
class Workspace:
    """Paths of one project environment."""

    root: Path
    state_dir: Path
    checkpoint_root: Path
    environment: str
    state: StateSettings = field(default_factory=StateSettings)

    @classmethod
    def of(cls, project: Project) -> Workspace:
        root = Path(project.root)
        return cls(root=root, state_dir=root / project.state_path,
                   checkpoint_root=root / project.runtime.checkpoint_root / project.environment,
                   environment=project.environment, state=project.state)

    @property
    def run_dir(self) -> Path:
        return self.state_dir / "run" / self.environment

    def state_backend(self) -> StateBackend:
        return make_backend(self.state, self.root, self.environment)

    def query_dir(self, name: str) -> Path:
        return self.run_dir / "queries" / name

    def datagen_dir(self, name: str) -> Path:
        return self.run_dir / "datagen" / name

    def checkpoint(self, name: str, version: str) -> Path:
        return self.checkpoint_root / name / version


def apps_beside(query_dir: Path) -> Path:
    """The shared applications' folder of the environment a query's run folder is in (RUN/queries/NAME ->
    RUN/apps, as `Workspace` lays them out): where an application that runs that query lists it."""
    return query_dir.parent.parent / "apps"
