"""``selfcheck``: the NPU kernel checked against the CPU on this device (the verdict that lets
backend ``auto`` use the NPU)."""

import pypto

NAME = "selfcheck"


def add_parser(commands, common):
    parser = commands.add_parser(
        NAME,
        parents=[common],
        help="check the NPU kernel against the CPU on this device (auto uses the NPU only after "
        "this passed; the verdict is cached)",
    )
    parser.add_argument("--again", action="store_true", help="run it even when a verdict is cached")


def handle(args):
    """Exit 0 passed, 1 failed, 2 no NPU."""
    reason = pypto.device.runtime_unavailable_reason()
    if reason is not None:
        raise pypto.device.NpuUnavailableError(f"no self-check: the NPU cannot run here: {reason}")
    verdict = pypto.device.self_check(again=args.again)
    print(
        f"pypto {pypto.__version__}: NPU self-check ({verdict['source']}, {verdict['checked_at']})"
    )
    for problem in verdict["problems"]:
        print(
            f"  {'pass' if problem['passed'] else 'FAIL'}  {problem['problem']}"
            + ("" if problem["passed"] else f": {problem['detail']}")
        )
    print(
        f"verdict: {'PASS' if verdict['passed'] else 'FAIL'}: {verdict['summary']}; auto "
        f"{'uses' if verdict['passed'] else 'does not use'} the NPU"
    )
    return 0 if verdict["passed"] else 1
