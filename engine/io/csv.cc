// CSV files of numbers (MXNet's CSVIter): read whole, checked line by line,
// then batched as arrays in memory.
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/file.h"
#include "engine/io/data_iter.h"

namespace kvtrain {
namespace {

std::string Where(const std::string& path, int64_t line) {
  return path + " line " + std::to_string(line);
}

}  // namespace

StatusOr<Tensor> ReadCsv(const std::string& path, int64_t width) {
  if (width < 1) {
    return Status::InvalidArgument(path + ": a row of " + std::to_string(width) +
                                   " values (the shape must hold at least one)");
  }
  KV_ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path));
  std::vector<float> values;
  int64_t line = 0;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    std::string row = text.substr(at, end - at);
    at = end + 1;
    ++line;
    if (!row.empty() && row.back() == '\r') row.pop_back();
    if (row.find_first_not_of(" \t") == std::string::npos) {
      if (at >= text.size()) break;  // the file's last newline
      return Status::InvalidArgument(Where(path, line) + " is empty");
    }
    int64_t column = 0;
    const char* p = row.c_str();
    for (;;) {
      ++column;
      char* stop = nullptr;
      errno = 0;
      const float v = std::strtof(p, &stop);
      while (stop != nullptr && (*stop == ' ' || *stop == '\t')) ++stop;
      if (stop == p || (*stop != ',' && *stop != '\0') || errno == ERANGE || !std::isfinite(v)) {
        return Status::InvalidArgument(Where(path, line) + " column " + std::to_string(column) +
                                       ": not a finite number");
      }
      values.push_back(v);
      if (*stop == '\0') break;
      p = stop + 1;
    }
    if (column != width) {
      return Status::InvalidArgument(Where(path, line) + " has " + std::to_string(column) +
                                     " values, the shape needs " + std::to_string(width));
    }
  }
  if (values.empty()) return Status::InvalidArgument(path + " holds no row");
  const int64_t rows = static_cast<int64_t>(values.size()) / width;
  Tensor t = Tensor::Empty(Shape({rows, width}));
  std::copy(values.begin(), values.end(), t.data<float>());
  return t;
}

StatusOr<std::unique_ptr<DataIter>> NewCsvIter(const std::string& data_csv,
                                               const Shape& data_shape,
                                               const std::string& label_csv,
                                               const IterOptions& opts) {
  if (data_shape.ndim() == 0) {
    return Status::InvalidArgument("CSVIter: data_shape is empty (the shape of one example)");
  }
  KV_ASSIGN_OR_RETURN(Tensor flat, ReadCsv(data_csv, data_shape.Product(0, data_shape.ndim())));
  const int64_t rows = flat.dim(0);
  std::vector<int64_t> dims = {rows};
  for (int d = 0; d < data_shape.ndim(); ++d) dims.push_back(data_shape[d]);
  KV_ASSIGN_OR_RETURN(Tensor data, flat.Reshape(Shape(dims)));
  Tensor label;
  if (label_csv.empty()) {
    label = Tensor::Zeros(Shape({rows}));
  } else {
    KV_ASSIGN_OR_RETURN(Tensor l, ReadCsv(label_csv, 1));
    if (l.dim(0) != rows) {
      return Status::InvalidArgument(label_csv + " has " + std::to_string(l.dim(0)) +
                                     " rows but " + data_csv + " has " + std::to_string(rows));
    }
    KV_ASSIGN_OR_RETURN(label, l.Reshape(Shape({rows})));
  }
  IterOptions o = opts;
  o.scale = 1.0f;
  return NewArrayIter(data, label, o);
}

}  // namespace kvtrain
