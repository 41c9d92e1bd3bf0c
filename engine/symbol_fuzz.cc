// Fuzz target: symbol files (P-symbol.txt, a GraphDef in protobuf text
// format) as Symbol::Load reads them: parse and build the graph, list its
// arguments and outputs, write it back, and infer shapes from a data shape
// taken from the first input byte.
#include <cstdint>
#include <map>
#include <string>

#include "engine/symbol.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using kvtrain::Shape;
  using kvtrain::Symbol;
  if (size < 1) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  kvtrain::StatusOr<Symbol> s = Symbol::FromText(text);
  if (!s.ok()) return 0;
  (void)s->ListArguments();
  (void)s->ListOutputs();
  (void)s->ToText();
  const int64_t batch = 1 + data[0] % 4;
  std::map<std::string, Shape> known;
  known["data"] = (data[0] & 4) ? Shape({batch, 784}) : Shape({batch, 1, 28, 28});
  known["softmax_label"] = Shape({batch});
  (void)s->InferShape(known);
  return 0;
}
