// The model names build_model knows (models/registry.h), in the order errors list them. A
// dependency-free header so that the config loader (launch/config.cpp, also built alone by the
// config fuzzer without any tensor code) validates model.name against this same list.
#pragma once

#include <array>
#include <string_view>

namespace dp {

inline constexpr std::array<std::string_view, 8> kModelNames = {
    "small_cnn", "mlp", "resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "bert"};

}  // namespace dp
