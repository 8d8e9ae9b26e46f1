#include "launch/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>

#include <nlohmann/json.hpp>

#include "launch/version.h"
#include "runtime/core/error.h"
#include "runtime/core/hash.h"

namespace dp {

namespace {

namespace fs = std::filesystem;

constexpr const char* kManifest = "checkpoint.json";
constexpr const char* kModelFile = "model.safetensors";
constexpr const char* kStateFile = "state.safetensors";

std::string errno_text() { return std::strerror(errno); }

// fsync of a file or directory; filesystems that cannot fsync a directory say EINVAL/ENOTSUP,
// which is as durable as they get.
void fsync_path(const std::string& path, bool directory) {
  const int fd = ::open(path.c_str(), (directory ? O_RDONLY | O_DIRECTORY : O_RDONLY) | O_CLOEXEC);
  DP_CHECK(fd >= 0, "checkpoint: cannot open '", path, "' to fsync it: ", errno_text());
  const int rc = ::fsync(fd);
  const int saved = errno;
  ::close(fd);
  errno = saved;
  DP_CHECK(rc == 0 || (directory && (errno == EINVAL || errno == ENOTSUP)), "checkpoint: fsync of '", path,
           "' failed: ", errno_text());
}

// Size and FNV-1a 64 of a file's bytes.
std::pair<uint64_t, uint64_t> size_and_digest(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  DP_CHECK(in.good(), "checkpoint: cannot read '", path, "': ", errno_text());
  Fnv1a digest;
  uint64_t size = 0;
  std::vector<char> chunk(1 << 20);
  while (in.read(chunk.data(), static_cast<std::streamsize>(chunk.size())) || in.gcount() > 0) {
    digest.bytes(chunk.data(), static_cast<size_t>(in.gcount()));
    size += static_cast<uint64_t>(in.gcount());
  }
  DP_CHECK(!in.bad(), "checkpoint: reading '", path, "' failed: ", errno_text());
  return {size, digest.value()};
}

// The manifest's own digest: FNV-1a of its JSON text without the digest entry (nlohmann's dump
// writes keys sorted, so the text is the same on reading). The files' digests cover the tensors;
// this covers the position, world size and config hash a resume trusts.
constexpr const char* kManifestDigest = "manifest_fnv1a64";
std::string manifest_digest(nlohmann::json manifest) {
  manifest.erase(kManifestDigest);
  const std::string text = manifest.dump();
  Fnv1a digest;
  digest.bytes(text.data(), text.size());
  return hex_digest(digest.value());
}

// step_<digits> → the step; anything else (temporaries, stray files) → nothing.
std::optional<int64_t> step_of(const std::string& name) {
  if (name.size() <= 5 || name.rfind("step_", 0) != 0) return std::nullopt;
  int64_t step = 0;
  for (size_t i = 5; i < name.size(); ++i) {
    if (name[i] < '0' || name[i] > '9' || step > (INT64_MAX - 9) / 10) return std::nullopt;
    step = step * 10 + (name[i] - '0');
  }
  return step;
}

void write_manifest(const std::string& path, const nlohmann::json& manifest) {
  {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    DP_CHECK(out.good(), "checkpoint: cannot create '", path, "': ", errno_text());
    out << manifest.dump(2) << "\n";
    out.flush();
    DP_CHECK(out.good(), "checkpoint: writing '", path, "' failed: ", errno_text());
  }
  fsync_path(path, /*directory=*/false);
}

}  // namespace

std::string save_checkpoint(const std::string& checkpoints_dir, const Checkpoint& checkpoint) {
  const CheckpointPosition& at = checkpoint.position;
  DP_CHECK(at.step >= 0 && at.epoch >= 0 && at.step_in_epoch >= 0, "checkpoint: invalid position step ", at.step,
           " epoch ", at.epoch, " step in epoch ", at.step_in_epoch);
  std::error_code ec;
  fs::create_directories(checkpoints_dir, ec);
  DP_CHECK(!ec, "checkpoint: cannot create '", checkpoints_dir, "': ", ec.message());
  char name[32];
  std::snprintf(name, sizeof name, "step_%09lld", static_cast<long long>(at.step));
  const std::string final_dir = (fs::path(checkpoints_dir) / name).string();
  DP_CHECK(!fs::exists(final_dir), "checkpoint: '", final_dir, "' exists already; it is kept as it is (a run that ",
           "resumed from an earlier step would write here: move it aside or choose another run.output_dir)");
  const std::string tmp = final_dir + ".tmp." + std::to_string(::getpid());
  fs::remove_all(tmp, ec);  // a temporary this process left behind
  try {
    fs::create_directory(tmp, ec);
    DP_CHECK(!ec, "checkpoint: cannot create '", tmp, "': ", ec.message());
    nlohmann::json files = nlohmann::json::object();
    for (const auto& [file, tensors] : {std::pair{kModelFile, &checkpoint.model}, std::pair{kStateFile, &checkpoint.state}}) {
      const std::string path = (fs::path(tmp) / file).string();
      save_tensors(path, *tensors, tensors == &checkpoint.model ? checkpoint.model_metadata
                                                                  : std::map<std::string, std::string>{});  // fsynced
      const auto [size, digest] = size_and_digest(path);
      files[file] = {{"bytes", size}, {"fnv1a64", hex_digest(digest)}};
    }
    nlohmann::json facts = nlohmann::json::object();
    for (const auto& [k, v] : checkpoint.facts) facts[k] = v;
    nlohmann::json manifest = {{"format", "dptrain checkpoint"},
                                     {"format_version", kCheckpointFormatVersion},
                                     {"dptrain_version", kDptrainVersion},
                                     {"step", at.step},
                                     {"epoch", at.epoch},
                                     {"step_in_epoch", at.step_in_epoch},
                                     {"samples", at.samples},
                                     {"world_size", checkpoint.world_size},
                                     {"config_hash", hex_digest(checkpoint.config_hash)},
                                     {"facts", facts},
                                     {"files", files}};
    if (std::isfinite(at.epoch_loss_sum)) manifest["epoch_loss_sum"] = at.epoch_loss_sum;  // JSON has no NaN
    manifest[kManifestDigest] = manifest_digest(manifest);
    write_manifest((fs::path(tmp) / kManifest).string(), manifest);
    fsync_path(tmp, /*directory=*/true);
    DP_CHECK(::rename(tmp.c_str(), final_dir.c_str()) == 0, "checkpoint: cannot rename '", tmp, "' to '", final_dir,
             "': ", errno_text());
  } catch (...) {
    fs::remove_all(tmp, ec);  // the earlier checkpoints are untouched; never a half one
    throw;
  }
  fsync_path(checkpoints_dir, /*directory=*/true);
  return final_dir;
}

std::vector<std::string> list_checkpoints(const std::string& checkpoints_dir) {
  std::vector<std::pair<int64_t, std::string>> found;
  std::error_code ec;
  if (!fs::is_directory(checkpoints_dir, ec)) return {};
  for (const auto& entry : fs::directory_iterator(checkpoints_dir, ec)) {
    const std::optional<int64_t> step = step_of(entry.path().filename().string());
    if (step && entry.is_directory()) found.emplace_back(*step, entry.path().string());
  }
  DP_CHECK(!ec, "checkpoint: cannot list '", checkpoints_dir, "': ", ec.message());
  std::sort(found.begin(), found.end());
  std::vector<std::string> out;
  for (auto& [step, path] : found) out.push_back(std::move(path));
  return out;
}

Checkpoint load_checkpoint(const std::string& dir, Device device) {
  const std::string manifest_path = (fs::path(dir) / kManifest).string();
  nlohmann::json manifest;
  {
    std::ifstream in(manifest_path, std::ios::binary);
    DP_CHECK(in.good(), "checkpoint '", dir, "': cannot read its manifest '", manifest_path, "': ", errno_text(),
             " (not a dptrain checkpoint, or an incomplete one)");
    try {
      in >> manifest;
    } catch (const nlohmann::json::exception& e) {
      throw Error(detail::concat("checkpoint '", dir, "': ", manifest_path, " is not valid JSON: ", e.what()));
    }
  }
  const std::string where = "checkpoint '" + dir + "'";
  try {
    DP_CHECK(manifest.value("format", "") == "dptrain checkpoint", where, ": ", manifest_path,
             " is not a dptrain checkpoint manifest");
    const int64_t version = manifest.at("format_version").get<int64_t>();
    DP_CHECK(version == kCheckpointFormatVersion, where, ": format version ", version, " (written by dptrain ",
             manifest.value("dptrain_version", "?"), "); this dptrain ", kDptrainVersion, " reads version ",
             kCheckpointFormatVersion);
    // Absent in checkpoints written before the manifest was covered (same format otherwise).
    if (manifest.contains(kManifestDigest))
      DP_CHECK(manifest.at(kManifestDigest).get<std::string>() == manifest_digest(manifest), where, ": ",
               manifest_path, " does not match its own digest (edited or corrupt): its position, world size and ",
               "config hash cannot be trusted");
    Checkpoint out;
    out.position.step = manifest.at("step").get<int64_t>();
    out.position.epoch = manifest.at("epoch").get<int64_t>();
    out.position.step_in_epoch = manifest.at("step_in_epoch").get<int64_t>();
    out.position.samples = manifest.value("samples", int64_t{-1});  // absent before it was counted
    out.position.epoch_loss_sum =
        manifest.value("epoch_loss_sum", std::numeric_limits<double>::quiet_NaN());  // absent: not known
    out.world_size = manifest.at("world_size").get<int>();
    DP_CHECK(out.position.step >= 0 && out.position.epoch >= 0 && out.position.step_in_epoch >= 0 &&
                 out.world_size >= 1,
             where, ": ", manifest_path, " holds an impossible position or world size (step ", out.position.step,
             ", epoch ", out.position.epoch, ", step in epoch ", out.position.step_in_epoch, ", world size ",
             out.world_size, ")");
    out.config_hash = std::stoull(manifest.at("config_hash").get<std::string>(), nullptr, 16);
    for (const auto& [k, v] : manifest.at("facts").items()) out.facts[k] = v.get<std::string>();
    // Every file as the manifest recorded it, before parsing it.
    for (const char* file : {kModelFile, kStateFile}) {
      const std::string path = (fs::path(dir) / file).string();
      const nlohmann::json& want = manifest.at("files").at(file);
      DP_CHECK(fs::exists(path), where, ": '", path, "' is missing");
      const auto [size, digest] = size_and_digest(path);
      DP_CHECK(size == want.at("bytes").get<uint64_t>(), where, ": '", path, "' has ", size, " bytes, the manifest ",
               "says ", want.at("bytes").get<uint64_t>(), " (truncated or replaced)");
      DP_CHECK(hex_digest(digest) == want.at("fnv1a64").get<std::string>(), where, ": '", path, "' does not match its ",
               "digest in the manifest (the file is corrupt)");
    }
    out.model = load_tensors((fs::path(dir) / kModelFile).string(), device, &out.model_metadata);
    out.state = load_tensors((fs::path(dir) / kStateFile).string(), device);
    return out;
  } catch (const nlohmann::json::exception& e) {
    throw Error(detail::concat(where, ": ", manifest_path, " lacks or mistypes an entry: ", e.what()));
  } catch (const std::invalid_argument&) {
    throw Error(detail::concat(where, ": ", manifest_path, ": config_hash is not a hexadecimal number"));
  } catch (const std::out_of_range&) {
    throw Error(detail::concat(where, ": ", manifest_path, ": config_hash is not a 64-bit number"));
  }
}

std::vector<std::string> remove_unfinished_saves(const std::string& checkpoints_dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  if (!fs::is_directory(checkpoints_dir, ec)) return removed;
  for (const auto& entry : fs::directory_iterator(checkpoints_dir, ec)) {
    const std::string name = entry.path().filename().string();
    const size_t tmp = name.find(".tmp.");
    if (tmp == std::string::npos || !step_of(name.substr(0, tmp)) || !entry.is_directory()) continue;
    fs::remove_all(entry.path(), ec);
    DP_CHECK(!ec, "checkpoint: cannot remove the unfinished save '", entry.path().string(), "': ", ec.message());
    removed.push_back(entry.path().string());
  }
  return removed;
}

std::vector<std::string> prune_checkpoints(const std::string& checkpoints_dir, int64_t keep) {
  DP_CHECK(keep >= 1, "prune_checkpoints: keep must be at least 1, got ", keep);
  std::vector<std::string> all = list_checkpoints(checkpoints_dir), removed;
  for (size_t i = 0; i + static_cast<size_t>(keep) < all.size(); ++i) {
    std::error_code ec;
    fs::remove_all(all[i], ec);
    DP_CHECK(!ec, "checkpoint: cannot remove the old checkpoint '", all[i], "': ", ec.message());
    removed.push_back(all[i]);
  }
  return removed;
}

}  // namespace dp
