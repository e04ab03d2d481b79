"""Helpers shared by the test files (tests/conftest.py puts tests/ on sys.path).

* reference.py: the independent float64 oracle (written without pypto) and exact roundings;
* numerics.py: problems, tiles, running the op and the fp32-accumulation accuracy check;
* strategies.py: Hypothesis strategies for the front door (valid, boundary, invalid, junk);
* npu_problems.py: extreme problems and legal tiles for the NPU planner's tests;
* slowdown.py: time limits scaled by PYPTO_TEST_TIME_SCALE (emulated CPUs);
* cpuinfo.py: the CPU's flags as Linux reports them.
"""
