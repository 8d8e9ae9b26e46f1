// The recipes the MLLOG writer and checker tests log (tests/launch/mllog_test.cpp,
// mllog_checker_test.cpp), in dptrain's keys: MLPerf's published ResNet-50 and BERT settings.
#pragma once

#include "launch/config.h"

namespace dp::testing {

// NVIDIA's 1xDGX H100 v4.0 ResNet-50 recipe (shared/MLPERF.md): LARS.
inline Config mllog_lars_config() {
  return config_from_yaml_string(R"(
run: {seed: 42, epochs: 37}
data: {batch_size: 3200}
optimizer: {name: lars, lr: 11.0, momentum: 0.9, weight_decay: 0.00005}
schedule: {name: poly, warmup_epochs: 2, min_lr: 0.0001, power: 2}
loss: {label_smoothing: 0.1}
)",
                                 "lars.yaml");
}

// The reference GPU ResNet-50 recipe: momentum SGD.
inline Config mllog_sgd_config() {
  return config_from_yaml_string(R"(
run: {seed: 1, epochs: 41}
data: {batch_size: 2048}
optimizer: {name: sgd, lr: 8.5, momentum: 0.9, weight_decay: 0.0002}
schedule: {name: poly, warmup_epochs: 5, min_lr: 0.0001, power: 2}
)",
                                 "sgd.yaml");
}

// NVIDIA's 8xA100 BERT recipe: LAMB with linear warmup and decay.
inline Config mllog_lamb_config() {
  return config_from_yaml_string(R"(
run: {seed: 9, epochs: 2}
data: {batch_size: 448}
optimizer: {name: lamb, lr: 0.000425, betas: [0.9, 0.999], weight_decay: 0.01, eps: 0.000001}
schedule: {name: linear, warmup_epochs: 0.5}
)",
                                 "bert.yaml");
}

}  // namespace dp::testing
