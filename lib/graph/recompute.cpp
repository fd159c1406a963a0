// Recomputation as a graph rewrite (see recompute.hpp): trade a long-lived activation for the
// cost of computing it again (Chen et al., "Training Deep Nets with Sublinear Memory Cost", 2016).
#include "recompute.hpp"

#include <algorithm>
#include <map>
#include <set>

namespace npurt {

namespace {

// The earliest gap between readers worth bridging: fewer operators in between and the
// activation would be freed and recomputed almost at once.
constexpr std::size_t min_gap = 3;
constexpr std::size_t max_chain = 3;

}  // namespace

std::vector<recompute_candidate> recompute_candidates(const graph& g) {
  const auto order = g.topological_order();
  std::vector<std::size_t> pos(g.nodes().size(), 0);
  for (std::size_t k = 0; k < order.size(); ++k) pos[order[k]] = k;
  std::map<std::string, std::vector<std::size_t>, std::less<>> readers;  // reader positions, ascending
  for (auto i : order)
    for (const auto& in : g.nodes()[i].inputs)
      if (!in.empty()) readers[in].push_back(pos[i]);
  const std::set<std::string, std::less<>> outputs(g.outputs().begin(), g.outputs().end());
  auto last_read = [&](const std::string& v) -> std::size_t {
    auto it = readers.find(v);
    return it == readers.end() || it->second.empty() ? 0 : it->second.back();
  };
  std::vector<recompute_candidate> out;
  for (auto p : order) {
    const node& n = g.nodes()[p];
    if (n.outputs.size() != 1) continue;
    const std::string& v = n.outputs[0];
    if (outputs.count(v) || !readers.count(v)) continue;
    // The widest gap between consecutive accesses (the write first).
    std::vector<std::size_t> acc{pos[p]};
    for (auto r : readers[v]) acc.push_back(r);
    std::size_t split = 0, gap = 0;
    for (std::size_t k = 0; k + 1 < acc.size(); ++k)
      if (acc[k + 1] - acc[k] > gap) gap = acc[k + 1] - acc[k], split = k;
    if (split == 0 || gap < min_gap) continue;  // no early reader, or nothing to bridge
    const std::size_t late = acc[split + 1];
    // The chain: producers to clone until every outside input is alive at `late` anyway.
    std::vector<std::size_t> chain{p};
    std::set<std::string> produced{v};
    bool ok = true;
    for (std::size_t k = 0; k < chain.size() && ok; ++k)
      for (const auto& in : g.nodes()[chain[k]].inputs) {
        if (in.empty() || produced.count(in)) continue;
        const value_info& vi = g.value(in);
        if (vi.kind != value_kind::activation || last_read(in) >= late || outputs.count(in)) continue;
        const node& q = g.nodes()[static_cast<std::size_t>(vi.producer)];
        if (chain.size() >= max_chain || q.outputs.size() != 1) {
          ok = false;
          break;
        }
        chain.push_back(static_cast<std::size_t>(vi.producer));
        produced.insert(in);
      }
    if (!ok) continue;
    std::sort(chain.begin(), chain.end(), [&](auto a, auto b) { return pos[a] < pos[b]; });
    const value_info& vi = g.value(v);
    out.push_back({v, chain, order[late], static_cast<std::size_t>(vi.shape.elements()) * size_of(vi.type)});
  }
  return out;
}

graph apply_recompute(const graph& g, const std::vector<recompute_candidate>& cs) {
  graph r(g.name());
  for (const auto& in : g.inputs()) r.add_input(in, g.value(in).shape, g.value(in).type);
  const auto order = g.topological_order();
  std::vector<std::size_t> pos(g.nodes().size(), 0);
  for (std::size_t k = 0; k < order.size(); ++k) pos[order[k]] = k;
  std::set<std::string> added;
  auto constants_of = [&](const node& n) {
    for (const auto& in : n.inputs)
      if (const tensor* c = g.constant(in); c && !added.count(in)) {
        added.insert(in);
        r.add_constant(in, c->is_host() ? c->clone() : tensor::timing_only(c->shape(), c->type()));
      }
  };
  // A clone's name is its original's with ".recompute", unless the graph (or an earlier clone)
  // already uses that name: then the first free ".recompute.<k>". Tensors and nodes have
  // separate namespaces.
  std::set<std::string> taken_values, taken_nodes;
  for (const auto& n : g.nodes()) taken_nodes.insert(n.name);
  auto fresh = [&](const std::string& base, std::set<std::string>& taken, bool value) {
    std::string name = base + ".recompute";
    for (std::size_t k = 1; taken.count(name) || (value && g.find(name) != nullptr); ++k)
      name = base + ".recompute." + std::to_string(k);
    taken.insert(name);
    return name;
  };
  // Per candidate: from its first late reader on, its chain's outputs read the clones.
  std::map<std::string, std::pair<std::size_t, std::string>> redirect;  // value -> (from position, clone)
  std::map<std::size_t, std::vector<const recompute_candidate*>> before;  // node -> chains cloned before it
  std::map<std::size_t, std::string> clone_node;                          // node -> its clone's name
  for (const auto& c : cs) {
    before[c.first_late].push_back(&c);
    for (auto k : c.chain) {
      const std::string& o = g.nodes()[k].outputs[0];
      redirect[o] = {pos[c.first_late], fresh(o, taken_values, true)};
      clone_node[k] = fresh(g.nodes()[k].name, taken_nodes, false);
    }
  }
  auto renamed = [&](const std::vector<std::string>& ins, std::size_t at) {
    std::vector<std::string> v = ins;
    for (auto& s : v)
      if (auto it = redirect.find(s); it != redirect.end() && at >= it->second.first) s = it->second.second;
    return v;
  };
  for (auto i : order) {
    const node& n = g.nodes()[i];
    if (auto it = before.find(i); it != before.end())
      for (const auto* c : it->second)
        for (auto k : c->chain) {
          const node& q = g.nodes()[k];
          r.add_node(q.type, clone_node.at(k), renamed(q.inputs, pos[i]), {redirect.at(q.outputs[0]).second}, q.attrs);
        }
    constants_of(n);
    r.add_node(n.type, n.name, renamed(n.inputs, pos[i]), n.outputs, n.attrs);
  }
  for (const auto& o : g.outputs()) {
    if (const tensor* c = g.constant(o); c && !added.count(o)) {
      added.insert(o);
      r.add_constant(o, c->clone());
    }
    r.set_output(o);
  }
  r.validate();
  return r;
}

}  // namespace npurt
