// NOTE [ Tensor-core shapes ]: the layers whose dimensions are not multiples of 8 are named, in
// named_modules() order, and the rest are not.
#include <gtest/gtest.h>

#include "models/small_cnn.h"
#include "runtime/core/runtime.h"
#include "runtime/nn/conv2d.h"
#include "runtime/nn/embedding.h"
#include "runtime/nn/linear.h"
#include "runtime/nn/sequential.h"
#include "runtime/nn/tensor_core_shapes.h"

namespace dp::nn {
namespace {

TEST(TensorCoreShapes, NamesEveryDimensionThatIsNotAMultipleOfEight) {
  Runtime runtime;
  Device cpu = runtime.cpu();
  Generator gen(0);
  Conv2dOptions grouped;
  grouped.groups = 4;
  Sequential model({std::make_shared<Embedding>(1000, 30, cpu, gen), std::make_shared<Conv2d>(3, 64, 3, cpu, gen),
                    std::make_shared<Conv2d>(96, 64, 3, cpu, gen, grouped),  // 24 per group: fine
                    std::make_shared<Conv2d>(64, 60, 1, cpu, gen), std::make_shared<Linear>(1024, 1000, cpu, gen),
                    std::make_shared<Linear>(1000, 10, cpu, gen)});
  const std::vector<ShapeAdvice> advice = tensor_core_shape_advice(model);
  ASSERT_EQ(advice.size(), 4u);
  EXPECT_EQ(describe(advice), "0 embedding_dim 30, 1 in_channels per group 3, 3 out_channels 60, 5 out_features 10");
  EXPECT_EQ(describe(advice, 2), "0 embedding_dim 30, 1 in_channels per group 3 and 2 more");
  EXPECT_EQ(describe(tensor_core_shape_advice(model, 2)), "1 in_channels per group 3");

  // The default recipe's model: its 1-channel input and 10 classes.
  SmallCNN cnn(1, 10, cpu, gen);
  EXPECT_EQ(describe(tensor_core_shape_advice(cnn)), "features.0 in_channels per group 1, classifier.2 out_features 10");
}

}  // namespace
}  // namespace dp::nn
