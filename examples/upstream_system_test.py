"""Upstream's system-test style, unchanged except for the device: a jit kernel writes its
result into the caller's tensor with ``input_grad.move(output)``, compared with PyTorch.

Run: python examples/upstream_system_test.py   (needs torch)
"""

import torch

import pypto

N, CIN, COUT, HIN, WIN, K, STRIDE, PAD, DIL = 1, 16, 16, 13, 13, 3, 2, 1, 1
HOUT = (HIN + 2 * PAD - DIL * (K - 1) - 1) // STRIDE + 1
WOUT = (WIN + 2 * PAD - DIL * (K - 1) - 1) // STRIDE + 1
DTYPE = pypto.DT_FP16


@pypto.frontend.jit(debug_options={"runtime_debug_mode": 0, "compile_debug_mode": 0})
def convbp_kernel(
    grad_output: pypto.Tensor((N, COUT, HOUT, WOUT), DTYPE),
    weight: pypto.Tensor((COUT, CIN, K, K), DTYPE),
    input_grad: pypto.Tensor((N, CIN, HIN, WIN), DTYPE),
):
    pypto.set_convbp_input_tile_shapes(
        pypto.pypto_impl.ConvBpTileL1Info(13, 144, 16),
        pypto.pypto_impl.ConvBpTileL0Info(16, 16, 16),
    )
    pypto.set_vec_tile_shapes(16, 16, 1, 16, 16)
    output = pypto.conv_backward_input(
        grad_output,
        [N, CIN, HIN, WIN],
        weight,
        DTYPE,
        [STRIDE, STRIDE],
        [PAD] * 4,
        [DIL, DIL],
        groups=1,
    )
    input_grad.move(output)


grad_out = torch.rand(N, COUT, HOUT, WOUT, dtype=torch.float16)
weight = torch.rand(COUT, CIN, K, K, dtype=torch.float16)
out = torch.zeros(N, CIN, HIN, WIN, dtype=torch.float16)
convbp_kernel(grad_out, weight, out)

golden = torch.ops.aten.convolution_backward(
    grad_out.float(),
    torch.zeros(N, CIN, HIN, WIN),
    weight.float(),
    bias_sizes=[],
    stride=[STRIDE] * 2,
    padding=[PAD] * 2,
    dilation=[DIL] * 2,
    transposed=False,
    output_padding=[0, 0],
    groups=1,
    output_mask=[True, False, False],
)[0]
close = torch.allclose(out.float(), golden.to(torch.float16).float(), atol=1e-2, rtol=1e-2)
print(
    f"upstream ST check (atol=rtol=1e-2): {'passed' if close else 'FAILED'}; "
    f"max |diff| = {(out.float() - golden).abs().max().item():.2e}"
)
raise SystemExit(0 if close else 1)
