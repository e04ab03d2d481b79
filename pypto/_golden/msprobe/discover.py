"""Finding an msprobe dump's dump.json files and reading each with its call tree
(construct.json beside it)."""

import os

from ..._core.fileio import read_json, show
from .records import CONSTRUCT_JSON, DUMP_JSON, TENSOR_FOLDER, dump_error

__all__ = ["find_dumps", "load_dump", "load_construct"]


def find_dumps(path):
    """Every dump.json at or below ``path`` (a dump.json itself, or any folder above one),
    sorted; a PyptoError when there is none."""
    if not isinstance(path, (str, os.PathLike)) or not str(path).strip():
        raise dump_error(
            f"the msprobe dump is {path!r}: give a folder holding dump.json (the "
            f"dump_path, a step or a rank folder)",
            TypeError if not isinstance(path, (str, os.PathLike)) else ValueError,
        )
    path = os.fspath(path)
    if os.path.lexists(path) and not os.path.isdir(path):  # read (or refused) as a file
        if os.path.basename(path) != DUMP_JSON:
            raise dump_error(
                f"{path} is not an msprobe dump.json: give the folder holding "
                f"dump.json (the dump_path, a step or a rank folder)"
            )
        return [path]
    if not os.path.isdir(path):
        raise dump_error(f"the msprobe dump {path} does not exist")
    found = []
    for folder, subfolders, files in os.walk(path):
        subfolders[:] = sorted(d for d in subfolders if d != TENSOR_FOLDER)  # no tensors read
        if DUMP_JSON in files:
            found.append(os.path.join(folder, DUMP_JSON))
    if not found:
        raise dump_error(
            f"no {DUMP_JSON} in {path} or below: give an msprobe dump folder (the "
            f"dump_path, a step or a rank folder)"
        )
    return sorted(found)


def load_dump(path):
    """The dump.json at ``path`` as a dict with a "data" object; a PyptoError for a file that
    is no dump.json or a dump without tensor files (task "statistics"). read_json reads
    regular files only: a FIFO named dump.json would block ``open``."""
    dump = read_json(path, "the msprobe dump")
    if not isinstance(dump, dict) or not isinstance(dump.get("data"), dict):
        raise dump_error(f'{path} is no msprobe dump.json: it has no "data" object of API calls')
    task = dump.get("task")
    if task is not None and task != "tensor":  # older dumps have no header: files tell
        holds = (
            "statistics (Max, Min, Mean, Norm) only" if task == "statistics" else "no tensor files"
        )
        raise dump_error(
            f"{path} is an msprobe dump of task {task!r}, which holds {holds}: dump "
            f'again with task "tensor" (level "L1" or "mix") to judge its '
            f"conv2d backward calls"
        )
    return dump


def load_construct(dump_json):
    """{call: parent} from construct.json beside dump.json ({} when there is none)."""
    path = os.path.join(os.path.dirname(dump_json), CONSTRUCT_JSON)
    if not os.path.lexists(path):
        return {}
    construct = read_json(path, "msprobe's call tree")
    if not isinstance(construct, dict):
        raise dump_error(f"{path}: msprobe's call tree must be an object of call: parent")
    for child, parent in construct.items():
        if parent is not None and not isinstance(parent, str):
            raise dump_error(
                f"{path}: the parent of {show(child)} must be a call's name or null, but is "
                f"{show(parent)}"
            )
    return construct
