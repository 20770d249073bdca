"""Scale-out: the same TrainConfig on slime (Megatron + SGLang on Ray) and on Modal.

    slime.py           the generate and rollout-log hooks slime calls (codedojo's agent loop inside slime)
    slime_command.py   a recipe -> slime's train.py / train_async.py command line and its YAML files
    slime_launch.py    config.launch(backend="slime"): `ray job submit`, or a dry run that prints it
    modal_sandbox.py   the "modal" sandbox backend (rate-limited creation, timeouts, orphan sweeping)
    modal_app.py       config.launch(backend="modal"): the Modal app that runs the slime command

Importing this package imports neither slime, ray nor modal; each is needed only where it is used.
"""
