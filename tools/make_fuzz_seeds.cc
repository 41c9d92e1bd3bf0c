// Writes the seed corpora of the fuzz targets (tools/fuzz.bzl) under the
// repository root given as the argument: valid inputs of every decoder,
// small enough to check in. Run once when a format changes:
//   bazel run //tools:make_fuzz_seeds -- "$PWD"
#include <zlib.h>

#include <cstdio>
#include <string>
#include <vector>

#include "engine/models.h"
#include "engine/symbol.h"
#include "trainer/checkpoint.h"
#include "net/fuzz_frames.h"
#include "transport/ps/message.h"
#include "ops/optimizer.h"
#include "proto/kvstore.pb.h"

namespace kvtrain {
namespace {

std::string root;

void Write(const std::string& rel, const std::string& bytes) {
  const std::string path = root + "/" + rel;
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
}

std::string Encode(ps::Message m) {
  const std::vector<ps::Blob> frames = ps::EncodeMessage(&m);
  std::vector<std::string_view> parts;
  for (const ps::Blob& f : frames) parts.emplace_back(f.data(), f.size());
  return net::JoinAt(parts, net::kFrameSeparator);
}

ps::Message Data(bool push, bool pull, std::vector<uint64_t> keys,
                 std::vector<float> vals, std::vector<int64_t> lens) {
  ps::Message m;
  m.meta.set_command(wire::DATA);
  m.meta.set_sender(ps::WorkerId(0));
  m.meta.set_recipient(ps::ServerId(0));
  m.meta.set_request(true);
  m.meta.set_push(push);
  m.meta.set_pull(pull);
  m.meta.set_timestamp(7);
  m.meta.set_job_id("job");
  m.AddFrame(wire::KEYS, ps::Blob::FromVector(std::move(keys)));
  if (!vals.empty()) m.AddFrame(wire::VALUES, ps::Blob::FromVector(std::move(vals)));
  if (!lens.empty()) m.AddFrame(wire::LENS, ps::Blob::FromVector(std::move(lens)));
  return m;
}

ps::Message Control(wire::Command cmd) {
  ps::Message m;
  m.meta.set_command(cmd);
  m.meta.set_job_id("job");
  return m;
}

void MessageSeeds() {
  const std::string d = "transport/ps/fuzz_corpus/message_fuzz/";
  Write(d + "push", Encode(Data(true, false, {1, 5}, {1, 2, 3, 4}, {})));
  Write(d + "push_lens", Encode(Data(true, false, {1, 5, 9}, {1, 2, 3, 4, 5, 6},
                                     {4, 12, 8})));
  Write(d + "pull", Encode(Data(false, true, {3}, {}, {})));
  ps::Message resp = Data(false, true, {3}, {1.5f}, {});
  resp.meta.set_request(false);
  resp.meta.set_status_code(3);
  resp.meta.set_status_message("no such key");
  Write(d + "response", Encode(resp));
  Write(d + "heartbeat", Encode(Control(wire::HEARTBEAT)));
  // Regression: lens that wrap around 2^64 to the value bytes given
  // (KVPairs::Validate accepted them; slicing then read out of bounds).
  const int64_t big = INT64_MAX;
  Write(d + "regression_lens_wrap", Encode(Data(true, false, {1, 2, 3}, {}, {big, big, 2})));
}

// Control seeds: [recipient][connection | fix-up bit] frames.
void ControlSeed(const std::string& name, int to, int from, ps::Message m) {
  std::string s;
  s.push_back(static_cast<char>(to));
  s.push_back(static_cast<char>(from | 4));
  Write("transport/ps/fuzz_corpus/control_fuzz/" + name, s + Encode(std::move(m)));
}

void ControlSeeds() {
  enum { kSched = 0, kServer = 1, kWorker = 2, kStranger = 3 };
  ps::Message b = Control(wire::BARRIER);
  b.meta.mutable_control()->set_barrier_group(ps::kAllGroups);
  b.meta.mutable_control()->set_barrier_seq(99);
  ControlSeed("barrier", kSched, kWorker, b);
  ps::Message bd = Control(wire::BARRIER_DONE);
  bd.meta.mutable_control()->set_barrier_group(ps::kWorkerGroup);
  bd.meta.mutable_control()->set_barrier_seq(99);
  ControlSeed("barrier_done", kWorker, kSched, bd);
  ControlSeed("heartbeat", kServer, kWorker, Control(wire::HEARTBEAT));
  ps::Message reg = Control(wire::REGISTER);
  wire::NodeInfo* n = reg.meta.mutable_control()->add_nodes();
  n->set_role(wire::WORKER);
  n->set_host("127.0.0.1");
  n->set_port(40000);
  n->set_num_workers(1);
  n->set_num_servers(1);
  n->set_token("stranger");
  ControlSeed("register", kSched, kStranger, reg);
  ps::Message table = Control(wire::NODE_TABLE);
  for (auto [role, id] : {std::pair{wire::SCHEDULER, 1}, {wire::SERVER, 8},
                          {wire::WORKER, 9}}) {
    wire::NodeInfo* e = table.meta.mutable_control()->add_nodes();
    e->set_role(role);
    e->set_id(id);
    e->set_host("127.0.0.1");
    e->set_port(9000 + id);
    e->set_token("t" + std::to_string(id));
  }
  ControlSeed("node_table", kWorker, kSched, table);
  ps::Message abort = Control(wire::ABORT);
  abort.meta.mutable_control()->set_reason("bad things");
  ControlSeed("abort_from_worker", kServer, kWorker, abort);
  ControlSeed("data", kServer, kWorker, Data(true, false, {1}, {2}, {}));
}

void CheckpointSeeds() {
  const std::string d = "trainer/fuzz_corpus/checkpoint_fuzz/";
  ModelArrays a;
  a.args["fc1_weight"] = Tensor::FromVector({1, 2, 3, 4}, {2, 2});
  a.args["fc1_bias"] = Tensor::FromVector({0.5f, -0.5f}, {2});
  a.aux["bn_moving_mean"] = Tensor::FromVector({0.25f}, {1});
  Write(d + "params", std::string(1, 0) + *EncodeParams(a, 3));
  for (auto type : {proto::OptimizerSpec::SGD, proto::OptimizerSpec::ADAM}) {
    proto::OptimizerSpec spec;
    spec.set_type(type);
    spec.set_learning_rate(0.1f);
    if (type == proto::OptimizerSpec::SGD) spec.set_momentum(0.9f);
    StatusOr<std::unique_ptr<Optimizer>> created = Optimizer::Create(spec);
    std::unique_ptr<Optimizer> opt = std::move(*created);
    Tensor w = Tensor::FromVector({1, 2, 3}, {3});
    (void)opt->Update(4, w, Tensor::FromVector({0.1f, 0.2f, 0.3f}, {3}));
    proto::KVStoreStatesFile file;
    file.set_store_type("dist_sync");
    file.add_states(*opt->SaveStates());
    Write(d + (type == proto::OptimizerSpec::SGD ? "states_sgd" : "states_adam"),
          std::string(1, 1) + file.SerializeAsString());
  }
}

void SymbolSeeds() {
  const std::string d = "engine/fuzz_corpus/symbol_fuzz/";
  Write(d + "mlp", std::string(1, 4) + *models::Mlp({16, 8}).ToText());
  Write(d + "lenet", std::string(1, '\0') + *models::LeNet().ToText());
}

std::string Be32(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16),
          static_cast<char>(v >> 8), static_cast<char>(v)};
}

std::string Gzip(const std::string& s) {
  z_stream z{};
  deflateInit2(&z, 9, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
  std::string out(s.size() + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(s.data()));
  z.avail_in = s.size();
  z.next_out = reinterpret_cast<Bytef*>(&out[0]);
  z.avail_out = out.size();
  deflate(&z, Z_FINISH);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

void IdxSeeds() {
  const std::string d = "engine/io/fuzz_corpus/idx_fuzz/";
  std::string bytes3 = std::string("\0\0\x08\x03", 4) + Be32(2) + Be32(3) + Be32(2);
  for (int i = 0; i < 12; ++i) bytes3.push_back(static_cast<char>(i * 20));
  Write(d + "uint8_3d", std::string(1, '\0') + bytes3);
  std::string floats = std::string("\0\0\x0D\x01", 4) + Be32(2);
  floats += std::string("\x3f\x80\x00\x00\x40\x00\x00\x00", 8);
  Write(d + "float_1d", std::string(1, '\0') + floats);
  std::string ints = std::string("\0\0\x0C\x01", 4) + Be32(1) + Be32(7);
  Write(d + "int_1d", std::string(1, '\0') + ints);
  Write(d + "uint8_3d_gz", std::string(1, '\1') + Gzip(bytes3));
  // Every other row read too (ReadIdxRows), plain and gzipped.
  Write(d + "uint8_3d_rows", std::string(1, '\3') + bytes3);
  Write(d + "uint8_3d_gz_rows", std::string(1, '\3') + Gzip(bytes3));
  // Regression: a 16-byte file whose header claims 2048^3 bytes
  // (ReadIdxFile allocated them before reading).
  Write(d + "regression_huge_header",
        std::string(1, '\1') + std::string("\0\0\x08\x03", 4) + Be32(2048) + Be32(2048) +
            Be32(2048));
}

}  // namespace
}  // namespace kvtrain

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: make_fuzz_seeds REPOSITORY_ROOT\n");
    return 2;
  }
  kvtrain::root = argv[1];
  kvtrain::MessageSeeds();
  kvtrain::ControlSeeds();
  kvtrain::CheckpointSeeds();
  kvtrain::SymbolSeeds();
  kvtrain::IdxSeeds();
  return 0;
}
