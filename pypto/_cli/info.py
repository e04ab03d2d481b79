"""``info``: the version, the CPU kernel in use and the levels built, threads, the NPU."""

import platform

import pypto
from pypto._core.cpus import default_threads
from pypto._kernels.dispatch import kernel_info

NAME = "info"


def add_parser(commands, common):
    commands.add_parser(NAME, parents=[common], help="version, kernel build and threads")


def handle(args):
    """Print what this pypto runs on; exit 0."""
    info = kernel_info()
    print(f"pypto {pypto.__version__}")
    print(
        f"cpu kernel: ISA {info['isa']} [{info['reason']}], micro-kernel "
        f"{info['mr']}x{info['nr']}, bf16 dot product {'yes' if info['bf16_dot'] else 'no'}, "
        f"OpenMP {'on' if info['openmp'] else 'off'}, {pypto.get_num_threads()} thread(s)"
    )
    print(
        f"default threads: {default_threads()[0]}, set by {default_threads()[1]} "
        "(OMP_NUM_THREADS, --threads and set_num_threads win)"
    )
    print(
        f"bf16 sum order: {info['bf16_sum_order']} (sum_order option, PYPTO_SUM_ORDER; fp16 "
        f"sums sequentially); order 'tile' here: {info['tile_unit']}"
    )
    print(
        f"cpu levels: built {', '.join(info['built_levels'])}; this CPU runs "
        f"{', '.join(info['cpu_levels'])} ({platform.machine()}; features: "
        f"{' '.join(info['cpu_features']) or 'none detected'})"
    )
    reason = pypto.device.unavailable_reason()
    print(
        f"npu: {'available' if reason is None else 'unavailable: ' + reason}; backend "
        f"requested: {pypto.get_device()} (set_device / PYPTO_DEVICE)"
    )
    verdict = pypto.device.known_self_check()
    if verdict is not None:
        print(
            f"npu self-check: {'passed' if verdict['passed'] else 'FAILED'} "
            f"({verdict['checked_at']}, {verdict['source']}): {verdict['summary']}"
        )
    return 0
