#include "planner/cli/output.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <cstdio>
#include <fstream>
#include <utility>

#include <unistd.h>

#include "simulator/core/error.h"

namespace trainplan {

void write_file_atomically(const std::string& path, const std::string& text, const std::string& flag) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw_input_error(flag, "", "cannot write \"" + path + "\"", "check the folder exists and is writable");
    out << text;
    out.close();
    if (!out) {
      std::remove(tmp.c_str());
      throw_input_error(flag, "", "cannot write \"" + path + "\"", "disk full?");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw_input_error(flag, "", "cannot rename onto \"" + path + "\"", "");
  }
}

std::string config_hash(const ModelSpec& m, const ClusterSpec& c, int gpus, const std::string& extra) {
  char buf[512];
  std::snprintf(buf, sizeof buf, "%s|%lld|%lld|%lld|%lld|%lld|%lld|%lld|%d|%d|%d|%d|%d|", m.name.c_str(),
                static_cast<long long>(m.layers), static_cast<long long>(m.hidden), static_cast<long long>(m.heads),
                static_cast<long long>(m.kv_heads), static_cast<long long>(m.ffn_hidden),
                static_cast<long long>(m.vocab), static_cast<long long>(m.seq_len), static_cast<int>(m.mlp),
                m.tied_embeddings, m.dropout, m.bias, static_cast<int>(m.position_embedding));
  std::snprintf(buf + std::strlen(buf), sizeof buf - std::strlen(buf), "%s|%s|%.6g|%.6g|%.6g|%d|%d|%s|", c.name.c_str(),
                c.gpu.name.c_str(), c.gpu.peak.count(Dtype::kBf16) ? c.gpu.peak.at(Dtype::kBf16).flop_per_s() : 0.0,
                c.intra_node.bandwidth.bytes_per_s(),
                c.inter_node ? c.inter_node->nic_bandwidth.bytes_per_s() : 0.0, c.gpus_per_node, gpus,
                c.calibration.c_str());
  const std::string text = std::string(buf) + extra;
  uint64_t h = 1469598103934665603ULL;  // FNV-1a 64
  for (unsigned char ch : text) {
    h ^= ch;
    h *= 1099511628211ULL;
  }
  char out[17];
  std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(h));
  return out;
}

std::string fixed(double x, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, x);
  return buf;
}

double rounded(double x, int decimals) {
  double f = std::pow(10.0, decimals);
  return std::round(x * f) / f;
}

}  // namespace trainplan

namespace trainplan {

std::string human_duration(double seconds) {
  char buf[32];
  if (!std::isfinite(seconds)) return "never";
  if (seconds < 1e-3) std::snprintf(buf, sizeof buf, "%.3g s", seconds);
  else if (seconds < 1) std::snprintf(buf, sizeof buf, "%.0f ms", seconds * 1e3);
  else if (seconds < 10) std::snprintf(buf, sizeof buf, "%.1f s", seconds);
  else if (seconds < 90) std::snprintf(buf, sizeof buf, "%.0f s", seconds);
  else if (seconds < 5400) std::snprintf(buf, sizeof buf, "%.1f min", seconds / 60);
  else if (seconds < 2 * 86400) std::snprintf(buf, sizeof buf, "%.1f h", seconds / 3600);
  else if (seconds < 1e5 * 86400) std::snprintf(buf, sizeof buf, "%.1f d", seconds / 86400);
  else std::snprintf(buf, sizeof buf, "%.3g d", seconds / 86400);
  return buf;
}

ProgressLine::ProgressLine(std::string what)
    : what_(std::move(what)), tty_(isatty(2) != 0), start_(std::chrono::steady_clock::now()), phase_start_(start_) {}

void ProgressLine::update(const std::string& phase, int64_t done, int64_t total, const std::string& eta_qualifier) {
  if (!tty_) return;
  const auto now = std::chrono::steady_clock::now();
  if (phase != phase_) {
    phase_ = phase;
    phase_start_ = now;
  }
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  if (elapsed < 1.0) return;  // short runs print nothing
  const double in_phase = std::chrono::duration<double>(now - phase_start_).count();
  std::string eta = "ETA ?";
  if (done > 0 && total >= done) {
    const double left = in_phase / static_cast<double>(done) * static_cast<double>(total - done);
    eta = "ETA " + (eta_qualifier.empty() ? "" : eta_qualifier + " ") + human_duration(left);
  }
  std::fprintf(stderr, "\r\033[K%s: %s %lld / %lld, %s elapsed, %s", what_.c_str(), phase.c_str(),
               static_cast<long long>(done), static_cast<long long>(total), human_duration(elapsed).c_str(),
               eta.c_str());
  std::fflush(stderr);
  shown_ = true;
}

void ProgressLine::clear() {
  if (!shown_) return;
  std::fprintf(stderr, "\r\033[K");
  std::fflush(stderr);
  shown_ = false;
}

}  // namespace trainplan
