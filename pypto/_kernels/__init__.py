"""CPU kernels of pypto (Cython). Only pypto._cpu calls them, with validated arguments.

The dgrad of one image is a GEMM with M = Hin*Win pixels, N = Cin, K = Cout*Kh*Kw::

    dx[ci, pixel] = sum_k  Wp[ci, k] * A[k, pixel]        k = (co, kh, kw)
    Wp[ci, k]     = w[co, ci, kh, kw]                      packed once per call, fp32
    A[k, pixel]   = dy[co, ho, wo] where ho*sh = hi + pt - kh*dh and wo*sw = wi + pl - kw*dw,
                    0 where no such (ho, wo) exists         gathered per L0 block, never whole

Tiling (pypto._tiling is the model; the user's L1/L0 tiles drive it):

    work item = (image, tileNL1 channels, tileML1 pixels)   <- OpenMP dynamic schedule
      M-L0: tileML0 pixels of the item
        fp32 C[tileNL1][tileML0] = 0
        K-L1: tileKL1 = whole Cout channels x all taps
          K-L0: gather A[tileKL0][tileML0]; N-L0: C += Wp block * A
        round C once (RNE) -> fp16/bf16, store NCHW in vec-tile chunks

Scratch per thread: C and one A block, sized by the tiles (no im2col of the whole image).
"""
