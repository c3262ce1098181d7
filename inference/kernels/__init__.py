"""Native CPU kernels that multiply GGUF-quantised weights in their own block formats.

`inference.kernels.ops` is the API (quant_matmul, dequantize, ISA selection); `formats` holds
the type ids and block geometry; `build` compiles the library into the model cache.
"""
