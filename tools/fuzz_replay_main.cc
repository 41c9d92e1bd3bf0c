// Replays fuzz inputs without libFuzzer: every regular file under the
// directories (or files) named on the command line goes through
// LLVMFuzzerTestOneInput once. A crash fails the test; the log names the file
// being replayed. Used by kv_fuzz_target's `<name>_test` (tools/fuzz.bzl).
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv)
    __attribute__((weak));

namespace {

void Collect(const std::string& path, std::vector<std::string>* files) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return;
  if (S_ISREG(st.st_mode)) {
    files->push_back(path);
    return;
  }
  if (!S_ISDIR(st.st_mode)) return;
  DIR* dir = opendir(path.c_str());
  if (dir == nullptr) return;
  while (dirent* e = readdir(dir)) {
    const std::string n = e->d_name;
    if (n == "." || n == "..") continue;
    Collect(path + "/" + n, files);
  }
  closedir(dir);
}

}  // namespace

int main(int argc, char** argv) {
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) Collect(argv[i], &files);
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::fprintf(stderr, "fuzz replay: no input files under the given paths\n");
    return 1;
  }
  for (const std::string& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::ostringstream bytes;
    bytes << in.rdbuf();
    const std::string s = bytes.str();
    std::fprintf(stderr, "replaying %s (%zu bytes)\n", f.c_str(), s.size());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  }
  std::printf("fuzz replay: %zu inputs, no crash\n", files.size());
  return 0;
}
