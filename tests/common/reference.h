// Checking ops against references: PyTorch fixtures (tests/fixtures/*.safetensors, layout in
// tests/fixtures/README.md) read as dp tensors, the same op run in float64, and a comparison
// that names the tensor and its worst element.
#pragma once

#include <functional>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "runtime/io/safetensors.h"
#include "runtime/tensor/tensor.h"

namespace dp::testing {

class Fixture {
 public:
  // Reads tests/fixtures/<name>.safetensors of this source tree; throws dp::Error when missing
  // or malformed.
  explicit Fixture(const std::string& name);
  // An F64, F32, I64 or U8 entry as a contiguous tensor of the same dtype on `device`.
  Tensor tensor(const std::string& name, Device device) const;
  // A __metadata__ value (options such as "eps"), or an error listing the file.
  const std::string& option(const std::string& key) const;
  double option_double(const std::string& key) const { return std::stod(option(key)); }
  // An "h,w" option (stride "2,1", padding, kernel_size) as a pair; an error naming the text
  // when it is not two integers.
  std::pair<int64_t, int64_t> option_pair(const std::string& key) const;

 private:
  std::string path_;
  SafetensorsFile file_;
};

// Empty when `actual` has `expected`'s shape and every element is within `tol` (absolute);
// else a message naming `what`, the shapes or the worst element.
std::string compare_tensors(const std::string& what, const Tensor& actual, const Tensor& expected, double tol);

// Runs `fn` forward and backward (fixed random upstream gradient) on `inputs` (float64) and on
// the same values cast to float32 (integer inputs unchanged); empty when the float32 output and
// input gradients are within `tol` of the float64 ones, else what differs.
std::string compare_float32_with_float64(const std::function<Tensor(const std::vector<Tensor>&)>& fn,
                                         const std::vector<Tensor>& inputs, double tol);

}  // namespace dp::testing

#define EXPECT_TENSOR_NEAR(what, actual, expected, tol)                                      \
  do {                                                                                       \
    std::string compare_msg = ::dp::testing::compare_tensors(what, actual, expected, tol);   \
    EXPECT_TRUE(compare_msg.empty()) << compare_msg;                                         \
  } while (0)
