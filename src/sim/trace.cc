#include "sim/trace.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <fstream>
#include <map>
#include <sstream>

#include "common/strings.h"

namespace atrium::sim {
namespace {

// A CSV file with a header; cells are plain (the trace has no quoting).
class CsvTable {
 public:
  static Result<CsvTable> Parse(std::string_view text) {
    CsvTable table;
    size_t line_no = 0;
    for (std::string_view rest = text; !rest.empty();) {
      size_t end = rest.find('\n');
      std::string_view line = rest.substr(0, end);
      rest = end == std::string_view::npos ? std::string_view{} : rest.substr(end + 1);
      ++line_no;
      if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
      if (line.empty()) continue;
      if (line.find('"') != std::string_view::npos) {
        return MakeUnexpected(Error::InvalidArgument("line " + std::to_string(line_no) +
                                                     ": quoted CSV cells are not supported"));
      }
      auto cells = SplitString(line, ',');
      if (table.header_.empty()) {
        for (auto cell : cells) table.header_.emplace_back(cell);
        continue;
      }
      if (cells.size() != table.header_.size()) {
        return MakeUnexpected(Error::InvalidArgument(
            "line " + std::to_string(line_no) + ": " + std::to_string(cells.size()) +
            " cells, the header has " + std::to_string(table.header_.size())));
      }
      table.rows_.push_back(std::move(cells));
      table.line_numbers_.push_back(line_no);
    }
    if (table.header_.empty()) return MakeUnexpected(Error::InvalidArgument("empty CSV file"));
    return table;
  }

  // Indexes of the named columns, in order, or an error naming a missing one.
  template <size_t N>
  Result<std::array<size_t, N>> Columns(const std::array<const char*, N>& names) const {
    std::array<size_t, N> out{};
    for (size_t i = 0; i < N; ++i) {
      auto c = Column(names[i]);
      if (!c.has_value()) return MakeUnexpected(c.error());
      out[i] = *c;
    }
    return out;
  }

  // Index of a column, or an error naming it.
  Result<size_t> Column(std::string_view name, bool required = true) const {
    for (size_t i = 0; i < header_.size(); ++i) {
      if (header_[i] == name) return i;
    }
    if (!required) return header_.size();
    return MakeUnexpected(Error::InvalidArgument("missing column \"" + std::string(name) + "\""));
  }

  Result<int64_t> Int(size_t row, size_t column) const {
    std::string_view cell = rows_[row][column];
    int64_t value = 0;
    auto [ptr, ec] = std::from_chars(cell.data(), cell.data() + cell.size(), value);
    if (ec != std::errc() || ptr != cell.data() + cell.size() || value < 0) {
      return MakeUnexpected(Error::InvalidArgument(
          "line " + std::to_string(line_numbers_[row]) + ", column \"" + header_[column] +
          "\": expected a non-negative integer, got \"" + std::string(cell) + "\""));
    }
    return value;
  }

  std::string_view Cell(size_t row, size_t column) const {
    return column < header_.size() ? rows_[row][column] : std::string_view{};
  }
  size_t rows() const { return rows_.size(); }

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string_view>> rows_;
  std::vector<size_t> line_numbers_;
};

// Caps cells of a trace: far above any real node or pod, low enough that sums
// over a few million rows cannot overflow.
constexpr int64_t kMaxCell = int64_t{1} << 40;

Result<int64_t> Bounded(Result<int64_t> value) {
  if (value.has_value() && *value > kMaxCell) {
    return MakeUnexpected(Error::InvalidArgument("value " + std::to_string(*value) + " too large"));
  }
  return value;
}

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return MakeUnexpected(Error::InvalidArgument("cannot read " + path));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace

Result<std::vector<TraceNode>> ParseNodeCsv(std::string_view text) {
  auto table = CsvTable::Parse(text);
  if (!table.has_value()) return MakeUnexpected(table.error());
  auto columns = table->Columns<5>({"sn", "cpu_milli", "memory_mib", "gpu", "model"});
  if (!columns.has_value()) return MakeUnexpected(columns.error());
  const auto& col = *columns;
  std::vector<TraceNode> nodes;
  for (size_t r = 0; r < table->rows(); ++r) {
    TraceNode node;
    node.name = std::string(table->Cell(r, col[0]));
    auto cpu = Bounded(table->Int(r, col[1]));
    auto mem = Bounded(table->Int(r, col[2]));
    auto gpus = table->Int(r, col[3]);
    if (!cpu.has_value()) return MakeUnexpected(cpu.error());
    if (!mem.has_value()) return MakeUnexpected(mem.error());
    if (!gpus.has_value()) return MakeUnexpected(gpus.error());
    if (*gpus > sched::kMaxGpusPerNode) {
      return MakeUnexpected(Error::InvalidArgument(
          "node " + node.name + ": " + std::to_string(*gpus) + " GPUs, at most " +
          std::to_string(sched::kMaxGpusPerNode) + " per node"));
    }
    node.cpu_milli = *cpu;
    node.memory_mib = *mem;
    node.gpus = static_cast<int32_t>(*gpus);
    node.model = std::string(table->Cell(r, col[4]));
    nodes.push_back(std::move(node));
  }
  return nodes;
}

Result<std::vector<TracePod>> ParsePodCsv(std::string_view text) {
  auto table = CsvTable::Parse(text);
  if (!table.has_value()) return MakeUnexpected(table.error());
  auto columns = table->Columns<5>({"name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"});
  if (!columns.has_value()) return MakeUnexpected(columns.error());
  const auto& col = *columns;
  const size_t spec_col = *table->Column("gpu_spec", /*required=*/false);
  std::vector<TracePod> pods;
  for (size_t r = 0; r < table->rows(); ++r) {
    TracePod pod;
    pod.name = std::string(table->Cell(r, col[0]));
    auto cpu = Bounded(table->Int(r, col[1]));
    auto mem = Bounded(table->Int(r, col[2]));
    auto num_gpu = table->Int(r, col[3]);
    auto milli = Bounded(table->Int(r, col[4]));
    if (!cpu.has_value()) return MakeUnexpected(cpu.error());
    if (!mem.has_value()) return MakeUnexpected(mem.error());
    if (!num_gpu.has_value()) return MakeUnexpected(num_gpu.error());
    if (!milli.has_value()) return MakeUnexpected(milli.error());
    if (*num_gpu > sched::kMaxGpusPerNode) {
      return MakeUnexpected(Error::InvalidArgument(
          "pod " + pod.name + ": " + std::to_string(*num_gpu) + " GPUs, more than any node has"));
    }
    pod.cpu_milli = *cpu;
    pod.memory_mib = *mem;
    pod.num_gpu = static_cast<int32_t>(*num_gpu);
    if (pod.num_gpu != 0) {
      pod.milli = static_cast<int32_t>(std::min<int64_t>(*milli, sched::kMilliPerGpu));
      for (auto part : SplitString(table->Cell(r, spec_col), '|')) {
        if (part.empty()) continue;
        if (!pod.types.empty()) pod.types += '|';
        pod.types += part;
      }
    }
    if (pod.milli == 0) pod.num_gpu = 0;  // a GPU count without milli asks for no GPU
    pods.push_back(std::move(pod));
  }
  return pods;
}

int64_t Trace::GpuCapacityMilli() const {
  int64_t total = 0;
  for (const auto& n : nodes) total += int64_t{n.gpus} * sched::kMilliPerGpu;
  return total;
}

int32_t Trace::ModelIndex(std::string_view model) const {
  auto it = std::lower_bound(models.begin(), models.end(), model);
  if (it == models.end() || *it != model) return -1;
  return static_cast<int32_t>(it - models.begin());
}

uint64_t Trace::MaskOf(const TracePod& pod) const {
  if (pod.types.empty()) return 0;
  uint64_t mask = uint64_t{1} << 63;
  for (auto part : SplitString(pod.types, '|')) {
    int32_t m = ModelIndex(part);
    if (m >= 0) mask |= uint64_t{1} << m;
  }
  return mask;
}

sched::NodeState Trace::StateOf(const TraceNode& node) const {
  sched::NodeState state;
  state.cpu_left = node.cpu_milli;
  state.mem_left = node.memory_mib;
  state.gpu_count = node.gpus;
  state.model = node.gpus > 0 ? ModelIndex(node.model) : -1;
  for (int i = 0; i < node.gpus; ++i) state.gpu_free[i] = sched::kMilliPerGpu;
  return state;
}

sched::Request Trace::RequestOf(const TracePod& pod) const {
  return sched::Request{pod.cpu_milli, pod.memory_mib, pod.num_gpu, pod.milli, MaskOf(pod)};
}

std::vector<sched::TypicalPod> Trace::TypicalPods() const {
  return sched::BuildTypicalPods(WorkloadSamples());
}

std::vector<sched::WorkloadSample> Trace::WorkloadSamples() const {
  std::vector<sched::WorkloadSample> samples;
  samples.reserve(pods.size());
  for (const auto& p : pods) {
    samples.push_back({p.cpu_milli, p.milli, p.num_gpu, p.types, MaskOf(p)});
  }
  return samples;
}

Result<Trace> MakeTrace(std::vector<TraceNode> nodes, std::vector<TracePod> pods) {
  Trace trace;
  auto by_name = [](const auto& a, const auto& b) { return a.name < b.name; };
  std::stable_sort(nodes.begin(), nodes.end(), by_name);
  std::stable_sort(pods.begin(), pods.end(), by_name);
  for (size_t i = 1; i < nodes.size(); ++i) {
    if (nodes[i].name == nodes[i - 1].name) {
      return MakeUnexpected(Error::InvalidArgument("node " + nodes[i].name + " listed twice"));
    }
  }
  for (const auto& n : nodes) {
    if (n.gpus > 0) trace.models.push_back(n.model);
  }
  std::sort(trace.models.begin(), trace.models.end());
  trace.models.erase(std::unique(trace.models.begin(), trace.models.end()), trace.models.end());
  if (trace.models.size() > 63) {
    return MakeUnexpected(Error::InvalidArgument("more than 63 GPU models in one trace"));
  }
  trace.nodes = std::move(nodes);
  trace.pods = std::move(pods);
  if (trace.nodes.empty()) return MakeUnexpected(Error::InvalidArgument("the trace has no nodes"));
  if (trace.GpuCapacityMilli() == 0) {
    return MakeUnexpected(Error::InvalidArgument("the trace's nodes have no GPUs"));
  }
  if (trace.pods.empty()) return MakeUnexpected(Error::InvalidArgument("the trace has no pods"));
  return trace;
}

Result<Trace> LoadTrace(const std::string& nodes_path, const std::string& pods_path) {
  auto node_text = ReadFile(nodes_path);
  if (!node_text.has_value()) return MakeUnexpected(node_text.error());
  auto pod_text = ReadFile(pods_path);
  if (!pod_text.has_value()) return MakeUnexpected(pod_text.error());
  auto nodes = ParseNodeCsv(*node_text);
  if (!nodes.has_value()) {
    return MakeUnexpected(Error::InvalidArgument(nodes_path + ": " + nodes.error().message));
  }
  auto pods = ParsePodCsv(*pod_text);
  if (!pods.has_value()) {
    return MakeUnexpected(Error::InvalidArgument(pods_path + ": " + pods.error().message));
  }
  return MakeTrace(std::move(*nodes), std::move(*pods));
}

}  // namespace atrium::sim
