"""The verifiers taskset id `crucible-kernels`: crucible's tasks and its multi-turn env.

verifiers (>= 0.4) imports a taskset by its id as a top-level module and takes the Taskset and
Env subclasses it exports through `__all__`; this module re-exports those of
`crucible_client.verifiers_env`, where they are written and documented:

    vf eval crucible-kernels --env.taskset.endpoint tcp://127.0.0.1:5555 ...
"""

from crucible_client.verifiers_env import CrucibleEnv, CrucibleTaskset

__all__ = ["CrucibleEnv", "CrucibleTaskset"]
