// The names data.dataset takes, in one place: the dataset factory (launch/datasets.h) builds
// them, and the config layer (launch/config.cpp, which links no tensor code) validates by them.
#pragma once

#include <array>
#include <string_view>

namespace dp {

inline constexpr std::array<std::string_view, 4> kDatasetNames = {"fashion_mnist", "image_folder", "synthetic", "text"};

}  // namespace dp
