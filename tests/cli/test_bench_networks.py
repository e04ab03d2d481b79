"""The network tables of ``python -m pypto.bench --networks`` (issue 27, item 2).

The tables are data typed in from their sources: these tests check them against figures
published independently of them (each model's multiply-adds per image, less the first layer's)
and against the op's rules, and run the benchmark once on the smallest setting.
"""

import pathlib
import subprocess
import sys

import pytest

import pypto
from pypto.bench.networks import NETWORKS
from support.slowdown import limit


def _gflop_per_image(net):
    return sum(layer.count * layer.problem(1).flops for layer in net.layers) / 1e9


@pytest.mark.parametrize(
    "name, published_gmacs, left_out_gmacs",
    [
        # torchvision's model table: 4.09 GMACs; conv1 7x7/2 3->64 at 224: 0.118
        ("resnet50", 4.09, 0.118),
        # torchvision: 5.71 GMACs; Conv2d_1a 3x3/2 3->32 at 299: 0.019, the aux head 0.003,
        # the classifier 0.002
        ("inception_v3", 5.71, 0.024),
        # ultralytics' yolov5s v6 table: 16.5 GFLOPs (2 x MACs); the 6x6/2 stem 3->32 at 640:
        # 0.354 GMACs; batch norms and the like ~0.05
        ("yolov5s", 16.5 / 2, 0.354 + 0.05),
    ],
)
def test_tables_add_up_to_the_published_multiply_adds(name, published_gmacs, left_out_gmacs):
    ours = _gflop_per_image(NETWORKS[name]) / 2
    assert ours == pytest.approx(published_gmacs - left_out_gmacs, rel=0.02)


def test_the_vae_decoder_table_follows_its_config():
    net = NETWORKS["sd_vae_decoder"]
    convs3x3 = [layer for layer in net.layers if layer.kh == 3]
    # conv_in, mid 2 x 2, four up blocks of 3 resnets x 2, three upsamplers, conv_out
    assert sum(layer.count for layer in convs3x3) == 1 + 4 + 4 * 6 + 3 + 1
    assert [layer.hin for layer in net.layers if "upsample" in layer.name] == [64, 128, 256]


@pytest.mark.parametrize("name", list(NETWORKS))
def test_every_layer_is_one_the_op_accepts(name):
    for layer in NETWORKS[name].layers:
        p = layer.problem(1)
        assert p.hout >= 1 and p.wout >= 1, layer
        tiles = pypto.suggest_convbp_input_tile_shapes(
            [p.n, p.cout, p.hout, p.wout],
            [p.cout, p.cin, p.kh, p.kw],
            [p.n, p.cin, p.hin, p.win],
            pypto.DT_BF16,
            [p.sh, p.sw],
            [p.pt, p.pb, p.pl, p.pr],
            [p.dh, p.dw],
        )
        with pypto.options(convbp_tile_shapes=tiles, vec_tile_shapes=[1, 16, 1, 64]):
            out = pypto.conv_backward_input(
                pypto.Tensor([p.n, p.cout, p.hout, p.wout], pypto.DT_BF16),
                [p.n, p.cin, p.hin, p.win],
                pypto.Tensor([p.cout, p.cin, p.kh, p.kw], pypto.DT_BF16),
                pypto.DT_BF16,
                [p.sh, p.sw],
                [p.pt, p.pb, p.pl, p.pr],
                [p.dh, p.dw],
            )
        assert out.shape == [p.n, p.cin, p.hin, p.win]


def test_bench_networks_runs():
    done = subprocess.run(
        [sys.executable, "-m", "pypto.bench", "--networks", "resnet50", "--batch", "1",
         "--threads", "1", "--dtypes", "bf16", "--rounds", "1", "--budget", "0"],
        capture_output=True,
        text=True,
        timeout=limit(600),
        cwd=pathlib.Path(__file__).resolve().parent,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "resnet50, batch 1, bf16, 1 thread(s): 52 convolutions (28 distinct)" in done.stdout


@pytest.mark.parametrize(
    "args",
    [["--networks", "vgg"], ["--batch", "2"], ["--networks", "--plot", "x.png"]],
)
def test_bad_network_arguments_are_usage_errors(args):
    done = subprocess.run(
        [sys.executable, "-m", "pypto.bench", *args],
        capture_output=True,
        text=True,
        timeout=limit(120),
        cwd=pathlib.Path(__file__).resolve().parent,  # not the source tree's unbuilt pypto
    )
    assert done.returncode == 2 and "error:" in done.stderr
