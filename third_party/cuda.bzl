"""kv_cuda_library: compiles .cu files with /usr/local/cuda/bin/nvcc under
--config=cuda; without it the library holds only its C++ sources."""

NVCC = "/usr/local/cuda/bin/nvcc"

# Real code for the A100 (sm_80) and H100/H200 (sm_90), plus PTX for newer GPUs.
NVCC_ARCH_FLAGS = " ".join([
    "-gencode=arch=compute_80,code=sm_80",
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
])

def kv_cuda_library(name, cu_srcs = [], cu_hdrs = [], srcs = [], hdrs = [], deps = [], **kwargs):
    """A cc_library whose .cu files are compiled by nvcc when CUDA is enabled.

    The .cu files may include only `cu_hdrs` (files of this repository) and
    system/CUDA headers: keep them to kernels and plain-pointer launchers.

    Args:
      name: the cc_library's name.
      cu_srcs: .cu files, compiled only with --config=cuda.
      cu_hdrs: repository headers the .cu files include.
      srcs: C++ sources, always compiled.
      hdrs: public headers.
      deps: cc_library dependencies; //third_party:cuda is added.
      **kwargs: passed to cc_library.
    """
    objs = []
    for cu in cu_srcs:
        obj = "_nvcc/" + name + "/" + cu[:-len(".cu")] + ".pic.o"
        native.genrule(
            name = name + "_nvcc_" + cu[:-len(".cu")].replace("/", "_"),
            srcs = [cu] + cu_hdrs,
            outs = [obj],
            cmd = " ".join([
                NVCC,
                "-c -O3 -std=c++17 -Xcompiler -fPIC",
                "-DKVTRAIN_CUDA=1",
                NVCC_ARCH_FLAGS,
                "-I.",
                "-o $@",
                "$(location %s)" % cu,
            ]),
            # Built only when a cuda-enabled library pulls it in.
            tags = ["manual"],
            visibility = ["//visibility:private"],
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = srcs + select({
            "//third_party:cuda_enabled": objs,
            "//conditions:default": [],
        }),
        hdrs = hdrs + cu_hdrs,
        deps = deps + ["//third_party:cuda"],
        **kwargs
    )
