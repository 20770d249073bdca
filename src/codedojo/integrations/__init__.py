"""Scale-out: the same TrainConfig on slime (Megatron + SGLang on Ray) and on Modal.

    slime.py           the generate and rollout-log hooks slime calls (codedojo's agent loop inside slime)
    slime_command.py   a recipe -> slime's train.py / train_async.py command line and its YAML files
    slime_launch.py    config.launch(backend="slime"): `ray job submit`, or a dry run that prints it
    modal_sandbox.py   the "modal" sandbox backend (rate-limited creation, timeouts, orphan sweeping)
    modal_app.py       config.launch(backend="modal"): the Modal app that runs the slime command

Importing this package imports neither slime, ray nor modal; each is needed only where it is used.
"""

from __future__ import annotations

from typing import Any


def launch_remote(config: Any, *, backend: str, address: str | None = None) -> Any:
    """Launch `config` (a TrainConfig) on "slime" (a Ray cluster, or a dry run) or "modal"; returns a Run."""
    if backend == "slime":
        from codedojo.integrations.slime_launch import launch_slime

        return launch_slime(config, address=address)
    if backend == "modal":
        from codedojo.integrations.modal_app import launch_modal

        return launch_modal(config)
    raise ValueError(f"unknown remote backend {backend!r}; choose 'slime' or 'modal'")
