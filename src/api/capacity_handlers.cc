// /api/v1/nodes, /api/v1/gpus, /api/v1/capacity: the fleet and what is free.
// Everyone with node.read sees the inventory and free capacity; a tenant
// caller sees only its own allocations on it.
#include <charconv>

#include "api/handler_util.h"
#include "api/handlers.h"
#include "api/views.h"
#include "capacity/gpu_catalog.h"
#include "common/json_reader.h"

namespace atrium::api {
namespace {

// The longest reason a GPU health change may carry (it goes into every
// decision the change causes).
constexpr size_t kMaxGpuHealthReason = 256;

std::string ViewerOf(const Context& ctx) {
  return ctx.principal && !ctx.principal->is_platform() ? ctx.principal->tenant_id : "";
}

std::string QueryOf(const Context& ctx, const std::string& name) {
  auto it = ctx.request.query.find(name);
  return it == ctx.request.query.end() ? "" : it->second;
}

// The model filter in its canonical spelling ("h100-80gb" → "H100-80GB").
Result<std::string> ModelFilter(const Context& ctx) {
  std::string model = QueryOf(ctx, "model");
  if (model.empty()) return model;
  const capacity::GpuModel* m = capacity::FindGpuModel(model);
  if (m == nullptr) {
    return Error::InvalidArgument("unknown GPU model '" + model +
                                  "' (known: " + capacity::KnownGpuModelNames() + ")");
  }
  return m->name;
}

// Node lists page by position in the fleet: the cursor is that number.
Result<scheduling::SchedulingService::NodeQuery> NodeQueryOf(const Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(ListOptions opts, ListOptionsOf(ctx.request));
  scheduling::SchedulingService::NodeQuery q;
  q.limit = static_cast<size_t>(opts.limit);
  if (!opts.after.empty()) {
    auto [ptr, ec] =
        std::from_chars(opts.after.data(), opts.after.data() + opts.after.size(), q.offset);
    if (ec != std::errc() || ptr != opts.after.data() + opts.after.size()) {
      return Error::InvalidArgument("cursor must be a node position");
    }
  }
  q.pool = QueryOf(ctx, "pool");
  ATRIUM_ASSIGN_OR_RETURN(q.model, ModelFilter(ctx));
  return q;
}

Json NextCursor(const std::optional<size_t>& next) {
  return next ? Json(std::to_string(*next)) : Json(nullptr);
}

Result<http::Response> NodeAction(Context& ctx, const char* action) {
  ATRIUM_ASSIGN_OR_RETURN(auto* scheduling, SchedulingOf(ctx));
  const std::string& name = ctx.request.PathParam("node");
  ctx.audit_target = "node/" + name;
  const std::string op = action;
  Status done = op == "cordon"  ? scheduling->Cordon(OriginOf(ctx), name)
                : op == "drain" ? scheduling->Drain(OriginOf(ctx), name)
                                : scheduling->Uncordon(OriginOf(ctx), name);
  ATRIUM_RETURN_IF_ERROR(done);
  ATRIUM_ASSIGN_OR_RETURN(auto node, scheduling->Node("", name));
  return JsonResponse(200, NodeView(node, /*with_gpus=*/true));
}

}  // namespace

Result<http::Response> ListNodes(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(auto* scheduling, SchedulingOf(ctx));
  ATRIUM_ASSIGN_OR_RETURN(auto query, NodeQueryOf(ctx));
  auto page = scheduling->Nodes(ViewerOf(ctx), query);
  Json items = Json::array();
  for (const auto& n : page.items) items.push_back(NodeView(n, /*with_gpus=*/false));
  return JsonResponse(200, {{"items", items}, {"next_cursor", NextCursor(page.next_offset)}});
}

Result<http::Response> GetNode(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(auto* scheduling, SchedulingOf(ctx));
  ATRIUM_ASSIGN_OR_RETURN(auto node,
                          scheduling->Node(ViewerOf(ctx), ctx.request.PathParam("node")));
  return JsonResponse(200, NodeView(node, /*with_gpus=*/true));
}

Result<http::Response> CordonNode(Context& ctx) { return NodeAction(ctx, "cordon"); }
Result<http::Response> DrainNode(Context& ctx) { return NodeAction(ctx, "drain"); }
Result<http::Response> UncordonNode(Context& ctx) { return NodeAction(ctx, "uncordon"); }

// PUT /api/v1/nodes/{node}/gpus/{gpu}/health {"healthy": bool, "reason": "..."}:
// the operator's (or the node's discovery's) word on a GPU.
Result<http::Response> SetGpuHealth(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(auto* scheduling, SchedulingOf(ctx));
  const std::string& name = ctx.request.PathParam("node");
  const std::string& index = ctx.request.PathParam("gpu");
  ctx.audit_target = "node/" + name + "/gpu/" + index;
  int gpu = -1;
  auto [ptr, ec] = std::from_chars(index.data(), index.data() + index.size(), gpu);
  if (ec != std::errc() || ptr != index.data() + index.size() || gpu < 0) {
    return Error::NotFound("node " + name + " has no GPU " + index);
  }
  ATRIUM_ASSIGN_OR_RETURN(Json body, BodyJson(ctx));
  JsonObjectReader r(body);
  const bool healthy = r.Bool("healthy", /*required=*/true).value_or(true);
  const std::string reason = r.String("reason", false, kMaxGpuHealthReason).value_or("");
  ATRIUM_RETURN_IF_ERROR(r.Finish());
  ATRIUM_RETURN_IF_ERROR(scheduling->SetGpuHealth(OriginOf(ctx), name, gpu, healthy, reason));
  ATRIUM_ASSIGN_OR_RETURN(auto node, scheduling->Node("", name));
  return JsonResponse(200, NodeView(node, /*with_gpus=*/true));
}

Result<http::Response> ListGpus(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(auto* scheduling, SchedulingOf(ctx));
  ATRIUM_ASSIGN_OR_RETURN(auto query, NodeQueryOf(ctx));
  const std::string node = QueryOf(ctx, "node");
  Json items = Json::array();
  std::optional<size_t> next;
  if (!node.empty()) {
    auto n = scheduling->Node(ViewerOf(ctx), node);
    if (!n.has_value() && n.error().code != ErrorCode::kNotFound) return n.error();
    if (n.has_value() && (query.pool.empty() || n->pool == query.pool) &&
        (query.model.empty() || n->gpu_model == query.model)) {
      for (const auto& g : n->gpus) items.push_back(GpuView(g));
    }
  } else {
    // Whole nodes per page until `limit` GPUs are listed (at least one node).
    const size_t limit = query.limit;
    query.limit = 1;
    while (items.size() < limit) {
      auto page = scheduling->Nodes(ViewerOf(ctx), query);
      if (page.items.empty()) break;
      for (const auto& g : page.items.front().gpus) items.push_back(GpuView(g));
      next = page.next_offset;
      if (!next) break;
      query.offset = *next;
    }
  }
  return JsonResponse(200, {{"items", items}, {"next_cursor", NextCursor(next)}});
}

Result<http::Response> GetCapacity(Context& ctx) {
  ATRIUM_ASSIGN_OR_RETURN(auto* scheduling, SchedulingOf(ctx));
  const std::string pool = QueryOf(ctx, "pool");
  ATRIUM_ASSIGN_OR_RETURN(std::string model, ModelFilter(ctx));
  Json items = Json::array();
  for (const auto& row : scheduling->Capacity()) {
    if (!pool.empty() && row.pool != pool) continue;
    if (!model.empty() && row.model != model) continue;
    items.push_back(CapacityView(row));
  }
  return JsonResponse(200, {{"items", items}, {"fleet_spec", scheduling->fleet_spec()}});
}

}  // namespace atrium::api
