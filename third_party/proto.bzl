"""kv_proto_library: compiles a .proto with the system protoc (Debian's
protobuf-compiler) into a cc_library; Bazel's own proto rules need downloads."""

def kv_proto_library(name, src, deps = [], visibility = None):
    """Generates <base>.pb.{h,cc} from `src` and wraps them in cc_library `name`.

    Args:
      name: the cc_library's name.
      src: one .proto file in this package.
      deps: other kv_proto_library targets whose .proto files `src` imports.
      visibility: the cc_library's visibility.
    """
    base = src[:-len(".proto")]
    native.genrule(
        name = name + "_protoc",
        srcs = [src] + [d + "_srcs" for d in deps],
        outs = [base + ".pb.h", base + ".pb.cc"],
        cmd = "protoc -I. --cpp_out=$(GENDIR) $(location %s)" % src,
        visibility = ["//visibility:private"],
    )
    native.filegroup(
        name = name + "_srcs",
        srcs = [src],
        visibility = visibility,
    )
    native.cc_library(
        name = name,
        srcs = [base + ".pb.cc"],
        hdrs = [base + ".pb.h"],
        deps = ["//third_party:protobuf"] + deps,
        visibility = visibility,
    )
