"""Layer tables of real networks, for ``python -m pypto.bench --networks`` (issue 27).

Each network is the list of its convolutions, as data: every layer whose input gradient a
training step computes and pypto's op accepts (groups 1, NCHW). The first convolution of each
network (its input is the image, which needs no gradient) is left out; pooling, attention,
normalisation and linear layers are not convolutions. A layer is

    (name, Cin, Cout, Hin, Win, Kh, Kw, stride, pad, count)

in the forward convolution's terms: ``Cin`` channels in, ``Cout`` out, an ``Hin`` x ``Win``
input, stride and padding as one int (both axes) or an (h, w) pair, dilation 1, and ``count``
identical layers in the network. The dgrad of such a layer takes dy ``[N, Cout, Hout, Wout]``
and gives dx ``[N, Cin, Hin, Win]``.
"""

from typing import NamedTuple

from .._core.shapes import forward_out_size
from .._core.tiling import ConvProblem


class Layer(NamedTuple):
    name: str
    cin: int
    cout: int
    hin: int
    win: int
    kh: int
    kw: int
    stride: object  # int, or (sh, sw)
    pad: object  # int, or (ph, pw): top = bottom, left = right
    count: int = 1

    def problem(self, batch):
        """The dgrad's ConvProblem at batch size ``batch``."""
        sh, sw = _pair(self.stride)
        ph, pw = _pair(self.pad)
        hout = forward_out_size(self.hin, self.kh, sh, ph, ph, 1)
        wout = forward_out_size(self.win, self.kw, sw, pw, pw, 1)
        return ConvProblem(
            batch, self.cin, self.cout, self.hin, self.win, hout, wout, self.kh, self.kw,
            sh, sw, ph, ph, pw, pw, 1, 1,
        )  # fmt: skip


def _pair(value):
    return (value, value) if isinstance(value, int) else tuple(value)


class Network(NamedTuple):
    name: str
    batch: int  # the default batch of the benchmark
    source: str  # where the layer table comes from
    layers: tuple


def _resnet50():
    """torchvision's resnet50 (v1.5: the stride in the 3x3 conv), 224 x 224."""
    layers = []
    cin, size = 64, 56
    for stage, (width, blocks) in enumerate(((64, 3), (128, 4), (256, 6), (512, 3)), 1):
        out = 4 * width
        stride = 1 if stage == 1 else 2
        after = size // stride
        s = f"layer{stage}"
        layers += [
            Layer(f"{s}.0.conv1 1x1", cin, width, size, size, 1, 1, 1, 0),
            Layer(f"{s}.0.conv2 3x3/{stride}", width, width, size, size, 3, 3, stride, 1),
            Layer(f"{s}.0.conv3 1x1", width, out, after, after, 1, 1, 1, 0),
            Layer(f"{s}.0.downsample 1x1/{stride}", cin, out, size, size, 1, 1, stride, 0),
            Layer(f"{s}.k.conv1 1x1", out, width, after, after, 1, 1, 1, 0, blocks - 1),
            Layer(f"{s}.k.conv2 3x3", width, width, after, after, 3, 3, 1, 1, blocks - 1),
            Layer(f"{s}.k.conv3 1x1", width, out, after, after, 1, 1, 1, 0, blocks - 1),
        ]
        cin, size = out, after
    return tuple(layers)


def _inception_a(name, cin, pool, size=35):
    return [
        Layer(f"{name}.branch1x1", cin, 64, size, size, 1, 1, 1, 0),
        Layer(f"{name}.branch5x5_1", cin, 48, size, size, 1, 1, 1, 0),
        Layer(f"{name}.branch5x5_2", 48, 64, size, size, 5, 5, 1, 2),
        Layer(f"{name}.branch3x3dbl_1", cin, 64, size, size, 1, 1, 1, 0),
        Layer(f"{name}.branch3x3dbl_2", 64, 96, size, size, 3, 3, 1, 1),
        Layer(f"{name}.branch3x3dbl_3", 96, 96, size, size, 3, 3, 1, 1),
        Layer(f"{name}.branch_pool", cin, pool, size, size, 1, 1, 1, 0),
    ]


def _inception_c(name, c7, size=17):
    return [
        Layer(f"{name}.branch1x1", 768, 192, size, size, 1, 1, 1, 0),
        Layer(f"{name}.branch7x7_1", 768, c7, size, size, 1, 1, 1, 0),
        Layer(f"{name}.branch7x7_2 1x7", c7, c7, size, size, 1, 7, 1, (0, 3)),
        Layer(f"{name}.branch7x7_3 7x1", c7, 192, size, size, 7, 1, 1, (3, 0)),
        Layer(f"{name}.branch7x7dbl_1", 768, c7, size, size, 1, 1, 1, 0),
        Layer(f"{name}.branch7x7dbl_2 7x1", c7, c7, size, size, 7, 1, 1, (3, 0)),
        Layer(f"{name}.branch7x7dbl_3 1x7", c7, c7, size, size, 1, 7, 1, (0, 3)),
        Layer(f"{name}.branch7x7dbl_4 7x1", c7, c7, size, size, 7, 1, 1, (3, 0)),
        Layer(f"{name}.branch7x7dbl_5 1x7", c7, 192, size, size, 1, 7, 1, (0, 3)),
        Layer(f"{name}.branch_pool", 768, 192, size, size, 1, 1, 1, 0),
    ]


def _inception_e(name, cin, size=8):
    return [
        Layer(f"{name}.branch1x1", cin, 320, size, size, 1, 1, 1, 0),
        Layer(f"{name}.branch3x3_1", cin, 384, size, size, 1, 1, 1, 0),
        Layer(f"{name}.branch3x3_2a 1x3", 384, 384, size, size, 1, 3, 1, (0, 1)),
        Layer(f"{name}.branch3x3_2b 3x1", 384, 384, size, size, 3, 1, 1, (1, 0)),
        Layer(f"{name}.branch3x3dbl_1", cin, 448, size, size, 1, 1, 1, 0),
        Layer(f"{name}.branch3x3dbl_2", 448, 384, size, size, 3, 3, 1, 1),
        Layer(f"{name}.branch3x3dbl_3a 1x3", 384, 384, size, size, 1, 3, 1, (0, 1)),
        Layer(f"{name}.branch3x3dbl_3b 3x1", 384, 384, size, size, 3, 1, 1, (1, 0)),
        Layer(f"{name}.branch_pool", cin, 192, size, size, 1, 1, 1, 0),
    ]


def _inception_v3():
    """torchvision's inception_v3 (Inception3), 299 x 299, without the auxiliary head."""
    return tuple(
        [
            Layer("Conv2d_2a_3x3", 32, 32, 149, 149, 3, 3, 1, 0),
            Layer("Conv2d_2b_3x3", 32, 64, 147, 147, 3, 3, 1, 1),
            Layer("Conv2d_3b_1x1", 64, 80, 73, 73, 1, 1, 1, 0),
            Layer("Conv2d_4a_3x3", 80, 192, 73, 73, 3, 3, 1, 0),
        ]
        + _inception_a("Mixed_5b", 192, 32)
        + _inception_a("Mixed_5c", 256, 64)
        + _inception_a("Mixed_5d", 288, 64)
        + [
            Layer("Mixed_6a.branch3x3 3x3/2", 288, 384, 35, 35, 3, 3, 2, 0),
            Layer("Mixed_6a.branch3x3dbl_1", 288, 64, 35, 35, 1, 1, 1, 0),
            Layer("Mixed_6a.branch3x3dbl_2", 64, 96, 35, 35, 3, 3, 1, 1),
            Layer("Mixed_6a.branch3x3dbl_3 3x3/2", 96, 96, 35, 35, 3, 3, 2, 0),
        ]
        + _inception_c("Mixed_6b", 128)
        + _inception_c("Mixed_6c", 160)
        + _inception_c("Mixed_6d", 160)
        + _inception_c("Mixed_6e", 192)
        + [
            Layer("Mixed_7a.branch3x3_1", 768, 192, 17, 17, 1, 1, 1, 0),
            Layer("Mixed_7a.branch3x3_2 3x3/2", 192, 320, 17, 17, 3, 3, 2, 0),
            Layer("Mixed_7a.branch7x7x3_1", 768, 192, 17, 17, 1, 1, 1, 0),
            Layer("Mixed_7a.branch7x7x3_2 1x7", 192, 192, 17, 17, 1, 7, 1, (0, 3)),
            Layer("Mixed_7a.branch7x7x3_3 7x1", 192, 192, 17, 17, 7, 1, 1, (3, 0)),
            Layer("Mixed_7a.branch7x7x3_4 3x3/2", 192, 192, 17, 17, 3, 3, 2, 0),
        ]
        + _inception_e("Mixed_7b", 1280)
        + _inception_e("Mixed_7c", 2048)
    )


def _c3(name, cin, cout, size, bottlenecks):
    """YOLOv5's C3 block: two 1x1 halves, n bottlenecks (1x1 then 3x3) on one, a 1x1 merge."""
    hidden = cout // 2
    return [
        Layer(f"{name}.cv1", cin, hidden, size, size, 1, 1, 1, 0),
        Layer(f"{name}.cv2", cin, hidden, size, size, 1, 1, 1, 0),
        Layer(f"{name}.cv3", 2 * hidden, cout, size, size, 1, 1, 1, 0),
        Layer(f"{name}.m.cv1", hidden, hidden, size, size, 1, 1, 1, 0, bottlenecks),
        Layer(f"{name}.m.cv2 3x3", hidden, hidden, size, size, 3, 3, 1, 1, bottlenecks),
    ]


def _yolov5s():
    """Ultralytics YOLOv5s v6 (yolov5s.yaml: depth 0.33, width 0.50), 640 x 640, 80 classes."""
    return tuple(
        [Layer("1 conv 3x3/2", 32, 64, 320, 320, 3, 3, 2, 1)]
        + _c3("2 C3", 64, 64, 160, 1)
        + [Layer("3 conv 3x3/2", 64, 128, 160, 160, 3, 3, 2, 1)]
        + _c3("4 C3", 128, 128, 80, 2)
        + [Layer("5 conv 3x3/2", 128, 256, 80, 80, 3, 3, 2, 1)]
        + _c3("6 C3", 256, 256, 40, 3)
        + [Layer("7 conv 3x3/2", 256, 512, 40, 40, 3, 3, 2, 1)]
        + _c3("8 C3", 512, 512, 20, 1)
        + [
            Layer("9 SPPF.cv1", 512, 256, 20, 20, 1, 1, 1, 0),
            Layer("9 SPPF.cv2", 1024, 512, 20, 20, 1, 1, 1, 0),
            Layer("10 conv 1x1", 512, 256, 20, 20, 1, 1, 1, 0),
        ]
        + _c3("13 C3", 512, 256, 40, 1)
        + [Layer("14 conv 1x1", 256, 128, 40, 40, 1, 1, 1, 0)]
        + _c3("17 C3 (P3)", 256, 128, 80, 1)
        + [Layer("18 conv 3x3/2", 128, 128, 80, 80, 3, 3, 2, 1)]
        + _c3("20 C3 (P4)", 256, 256, 40, 1)
        + [Layer("21 conv 3x3/2", 256, 256, 40, 40, 3, 3, 2, 1)]
        + _c3("23 C3 (P5)", 512, 512, 20, 1)
        + [
            Layer("24 Detect P3 1x1", 128, 255, 80, 80, 1, 1, 1, 0),
            Layer("24 Detect P4 1x1", 256, 255, 40, 40, 1, 1, 1, 0),
            Layer("24 Detect P5 1x1", 512, 255, 20, 20, 1, 1, 1, 0),
        ]
    )


def _resnet_block(name, cin, cout, size):
    """A diffusers ResnetBlock2D: two 3x3 convs, a 1x1 shortcut when the width changes."""
    layers = [
        Layer(f"{name}.conv1 3x3", cin, cout, size, size, 3, 3, 1, 1),
        Layer(f"{name}.conv2 3x3", cout, cout, size, size, 3, 3, 1, 1),
    ]
    if cin != cout:
        layers.append(Layer(f"{name}.conv_shortcut 1x1", cin, cout, size, size, 1, 1, 1, 0))
    return layers


def _sd_vae_decoder():
    """Stable Diffusion's VAE decoder (diffusers AutoencoderKL, block_out_channels 128, 256,
    512, 512, layers_per_block 2), a 4 x 32 x 32 latent to a 256 x 256 image."""
    layers = [Layer("conv_in 3x3", 4, 512, 32, 32, 3, 3, 1, 1)]
    layers += [layer._replace(count=2) for layer in _resnet_block("mid.resnets.k", 512, 512, 32)]
    cin, size = 512, 32
    for i, cout in enumerate((512, 512, 256, 128)):
        first = _resnet_block(f"up{i}.resnets.0", cin, cout, size)
        rest = _resnet_block(f"up{i}.resnets.1-2", cout, cout, size)
        layers += first + [layer._replace(count=2) for layer in rest]
        if i < 3:  # nearest 2x, then a 3x3
            size *= 2
            layers.append(Layer(f"up{i}.upsample conv 3x3", cout, cout, size, size, 3, 3, 1, 1))
        cin = cout
    layers.append(Layer("conv_out 3x3", 128, 3, size, size, 3, 3, 1, 1))
    return tuple(layers)


NETWORKS = {
    net.name: net
    for net in (
        Network(
            "resnet50",
            8,
            "torchvision.models.resnet50 (He et al. 2015, Table 1; v1.5 strides), 224x224",
            _resnet50(),
        ),
        Network(
            "inception_v3",
            8,
            "torchvision.models.inception_v3 (Szegedy et al. 2016), 299x299, no aux head",
            _inception_v3(),
        ),
        Network(
            "yolov5s",
            2,
            "ultralytics/yolov5 models/yolov5s.yaml v6.0 (C3, SPPF), 640x640, 80 classes",
            _yolov5s(),
        ),
        Network(
            "sd_vae_decoder",
            1,
            "diffusers AutoencoderKL decoder, Stable Diffusion v1 config, latent 32x32 -> 256x256",
            _sd_vae_decoder(),
        ),
    )
}
