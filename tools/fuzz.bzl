"""kv_fuzz_target: one libFuzzer entry point, built two ways.

- `<name>_test`: a cc_test (any compiler, part of `bazel test //...`) that
  replays every file under `fuzz_corpus/<name>/` (seeds and the inputs of
  crashes found so far) through LLVMFuzzerTestOneInput.
- `<name>er`: the libFuzzer binary, tagged `manual`; only tools/fuzz.sh builds
  it, with clang and `--config=fuzz`.
"""

def kv_fuzz_target(name, srcs, deps, size = "small", **kwargs):
    corpus = "fuzz_corpus/" + name
    native.cc_test(
        name = name + "_test",
        size = size,
        srcs = srcs,
        deps = deps + ["//tools:fuzz_replay_main"],
        data = native.glob([corpus + "/**"]),
        args = [native.package_name() + "/" + corpus],
        **kwargs
    )
    native.cc_binary(
        name = name + "er",
        srcs = srcs,
        deps = deps,
        linkopts = ["-fsanitize=fuzzer"],
        tags = ["manual", "fuzz"],
        testonly = True,
        **kwargs
    )
