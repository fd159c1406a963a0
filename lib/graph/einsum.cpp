// Einsum as a chain of the graph's operators (see einsum.hpp). The equation's meaning is
// numpy.einsum's, which ONNX's reference (onnx/reference/ops/op_einsum.py) calls: spaces are
// skipped, a term's letters name its axes and '...' the axes left over, numpy-broadcast across
// the operands; a letter repeated in one term takes the diagonal; without '->' the output is the
// broadcast axes followed by the letters used once, in character-code order (upper case first).
#include "einsum.hpp"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

namespace npurt::detail {

namespace {

// A label per axis: the 52 letters in character-code order, then one per broadcast ('...') axis.
constexpr int letter_count = 52;

bool is_letter(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }
int label_of(char c) { return c <= 'Z' ? c - 'A' : c - 'a' + 26; }

// One term of the equation: its letters in order, and where '...' stands among them.
struct term {
  std::vector<int> letters;
  std::ptrdiff_t ellipsis = -1;
};

// An operand on its way through the chain: its value, one label per axis, and each axis' extent.
struct operand {
  std::string value;
  std::vector<int> labels;
  std::vector<std::int64_t> dims;
};

std::string join(const std::vector<std::int64_t>& v) {
  std::string s = "[";
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i != 0) s += ',';
    s += std::to_string(v[i]);
  }
  return s + "]";
}

bool contains(const std::vector<int>& v, int l) { return std::find(v.begin(), v.end(), l) != v.end(); }

class einsum_chain {
 public:
  einsum_chain(graph& g, const std::string& node_name, const std::string& equation, const chain_builder& chain)
      : g_(g), node_(node_name), equation_(equation), chain_(chain) {}

  void build(const std::vector<std::string>& ins, const std::string& y) {
    // numpy's parser skips spaces anywhere in the equation.
    std::string eq;
    for (const char c : equation_)
      if (c != ' ') eq += c;
    const auto arrow = eq.find("->");
    const std::string lhs = eq.substr(0, arrow);
    std::vector<term> terms;
    for (std::size_t from = 0, k = 0;; ++k) {
      const auto comma = lhs.find(',', from);
      terms.push_back(parse(lhs.substr(from, comma == std::string::npos ? std::string::npos : comma - from),
                            "term " + std::to_string(k)));
      if (comma == std::string::npos) break;
      from = comma + 1;
    }
    if (terms.size() != ins.size())
      fail(errc::invalid_argument, {},
           "the equation has " + std::to_string(terms.size()) + " input term(s) but the node " +
               std::to_string(ins.size()) + " input(s)");
    std::vector<value_info> infos;
    for (std::size_t i = 0; i < ins.size(); ++i) {
      if (ins[i].empty()) fail(errc::invalid_argument, {}, "input " + std::to_string(i) + " is not named");
      // Copies: the steps added below grow the graph's table of values.
      infos.push_back(g_.value(ins[i]));
      const value_info& v = infos.back();
      if (v.type != infos[0].type)
        fail(errc::invalid_dtype, ins[i],
             "operand " + std::to_string(i) + " ('" + ins[i] + "') is " + std::string(to_string(v.type)) +
                 ", operand 0 is " + std::string(to_string(infos[0].type)));
      const auto named = terms[i].letters.size(), rank = v.shape.rank();
      if (terms[i].ellipsis < 0 ? rank != named : rank < named)
        fail(errc::invalid_shape, ins[i],
             "operand " + std::to_string(i) + " ('" + ins[i] + "') has rank " + std::to_string(rank) +
                 " but its term names " + std::to_string(named) + " ax" + (named == 1 ? "is" : "es") +
                 (terms[i].ellipsis < 0 ? "" : " besides '...'"));
    }
    // Every step is a MatMul's operand or output at some point (the kernels' cube takes floats).
    if (!is_float(infos[0].type))
      fail(errc::not_supported, ins[0],
           "element type " + std::string(to_string(infos[0].type)) +
               " is not supported (Einsum is lowered to MatMul, which takes floating-point tensors)");
    // The broadcast axes: each operand's '...' axes aligned to the right, numpy-broadcast.
    std::size_t broadcast_rank = 0;
    for (std::size_t i = 0; i < ins.size(); ++i)
      if (terms[i].ellipsis >= 0)
        broadcast_rank = std::max(broadcast_rank, infos[i].shape.rank() - terms[i].letters.size());
    std::vector<std::int64_t> broadcast(broadcast_rank, 1);
    std::vector<std::int64_t> letter_size(letter_count, -1);
    std::vector<std::size_t> letter_from(letter_count, 0);
    std::vector<operand> ops;
    for (std::size_t i = 0; i < ins.size(); ++i) {
      const term& t = terms[i];
      const shape& s = infos[i].shape;
      const std::size_t under = s.rank() - t.letters.size();
      operand o{ins[i], {}, {}};
      for (std::size_t a = 0, at = 0; a < s.rank(); ++a) {
        if (t.ellipsis >= 0 && a >= static_cast<std::size_t>(t.ellipsis) &&
            a < static_cast<std::size_t>(t.ellipsis) + under) {
          const std::size_t p = broadcast_rank - under + (a - static_cast<std::size_t>(t.ellipsis));
          if (s[a] != 1 && broadcast[p] != 1 && broadcast[p] != s[a])
            fail(errc::invalid_shape, ins[i],
                 "the axes under '...' do not broadcast: operand " + std::to_string(i) + " ('" + ins[i] +
                     "') has extent " + std::to_string(s[a]) + " where another has " + std::to_string(broadcast[p]));
          if (s[a] != 1) broadcast[p] = s[a];
          o.labels.push_back(letter_count + static_cast<int>(p));
        } else {
          const int l = t.letters[at++];
          const auto li = static_cast<std::size_t>(l);
          // numpy's einsum broadcasts a letter of extent 1 in one operand against its extent in
          // another (np.einsum('ij,jk->ik', ones((3, 1)), ones((4, 5))) sums j over 4), as its
          // iterator broadcasts operands; a letter repeated within one operand (a diagonal) must
          // have one extent there.
          const auto earlier = std::find(o.labels.begin(), o.labels.end(), l);
          if (earlier != o.labels.end() && o.dims[static_cast<std::size_t>(earlier - o.labels.begin())] != s[a])
            fail(errc::invalid_shape, ins[i],
                 "letter '" + letter(l) + "' is repeated in operand " + std::to_string(i) + " ('" + ins[i] +
                     "') with extents " + std::to_string(o.dims[static_cast<std::size_t>(earlier - o.labels.begin())]) +
                     " and " + std::to_string(s[a]) + " (a diagonal needs one extent)");
          if (letter_size[li] < 0 || (letter_size[li] == 1 && s[a] != 1)) {
            letter_size[li] = s[a];
            letter_from[li] = i;
          } else if (letter_size[li] != s[a] && s[a] != 1) {
            const std::size_t j = letter_from[li];
            fail(errc::invalid_shape, ins[i],
                 "letter '" + letter(l) + "' is " + std::to_string(letter_size[li]) + " in operand " +
                     std::to_string(j) + " ('" + ins[j] + "') but " + std::to_string(s[a]) + " in operand " +
                     std::to_string(i) + " ('" + ins[i] + "'), and neither is 1 (which would broadcast)");
          }
          o.labels.push_back(l);
        }
        o.dims.push_back(s[a]);
      }
      ops.push_back(std::move(o));
    }
    std::optional<std::string> rhs;
    if (arrow != std::string::npos) rhs = eq.substr(arrow + 2);
    const std::vector<int> out = output_labels(rhs, terms, letter_size, broadcast_rank);
    std::vector<std::int64_t> out_dims;
    for (const int l : out)
      out_dims.push_back(l < letter_count ? letter_size[static_cast<std::size_t>(l)]
                                          : broadcast[static_cast<std::size_t>(l - letter_count)]);
    if (out_dims.size() > shape::max_rank)
      fail(errc::not_supported, y,
           "the output has " + std::to_string(out_dims.size()) + " axes; npurt's tensors have at most " +
               std::to_string(shape::max_rank));
    emit(std::move(ops), letter_size, out, out_dims, y);
  }

 private:
  [[noreturn]] void fail(errc e, const std::string& tensor, const std::string& what) const {
    throw graph_error(make_error_code(e), node_, tensor,
                      "Einsum '" + node_ + "' (equation '" + equation_ + "'): " + what);
  }

  static std::string letter(int l) { return std::string(1, static_cast<char>(l < 26 ? 'A' + l : 'a' + l - 26)); }

  term parse(const std::string& s, const std::string& which) const {
    term t;
    for (std::size_t i = 0; i < s.size();) {
      if (is_letter(s[i])) {
        t.letters.push_back(label_of(s[i++]));
      } else if (s.compare(i, 3, "...") == 0 && t.ellipsis < 0) {
        t.ellipsis = static_cast<std::ptrdiff_t>(t.letters.size());
        i += 3;
      } else if (s[i] == '.') {
        fail(errc::invalid_argument, {},
             which + (t.ellipsis >= 0 && s.compare(i, 3, "...") == 0 ? " has a second '...'"
                                                                     : " has a '.' that is not part of '...'"));
      } else {
        const auto c = static_cast<unsigned char>(s[i]);
        fail(errc::invalid_argument, {},
             which + " has " +
                 (c >= 0x21 && c < 0x7f ? "'" + std::string(1, s[i]) + "'" : "the byte " + std::to_string(c)) +
                 ", which is neither a letter nor '...'" + (s[i] == '-' || s[i] == '>' ? " (one '->' at most)" : ""));
      }
    }
    return t;
  }

  // The output's labels: the explicit term's, or numpy's implicit order.
  std::vector<int> output_labels(const std::optional<std::string>& rhs, const std::vector<term>& terms,
                                 const std::vector<std::int64_t>& letter_size, std::size_t broadcast_rank) const {
    std::vector<int> out;
    const auto push_broadcast = [&] {
      for (std::size_t p = 0; p < broadcast_rank; ++p) out.push_back(letter_count + static_cast<int>(p));
    };
    if (!rhs) {
      std::vector<int> uses(letter_count, 0);
      for (const term& t : terms)
        for (const int l : t.letters) ++uses[static_cast<std::size_t>(l)];
      push_broadcast();
      for (int l = 0; l < letter_count; ++l)
        if (uses[static_cast<std::size_t>(l)] == 1) out.push_back(l);
      return out;
    }
    const term t = parse(*rhs, "the output term");
    for (std::size_t k = 0; k < t.letters.size(); ++k) {
      const int l = t.letters[k];
      if (letter_size[static_cast<std::size_t>(l)] < 0)
        fail(errc::invalid_argument, {}, "output letter '" + letter(l) + "' is in no input term");
      if (std::find(t.letters.begin(), t.letters.begin() + static_cast<std::ptrdiff_t>(k), l) !=
          t.letters.begin() + static_cast<std::ptrdiff_t>(k))
        fail(errc::invalid_argument, {}, "output letter '" + letter(l) + "' appears twice");
      if (static_cast<std::ptrdiff_t>(k) == t.ellipsis) push_broadcast();
      out.push_back(l);
    }
    if (t.ellipsis == static_cast<std::ptrdiff_t>(t.letters.size())) push_broadcast();
    // numpy: the broadcast axes must go somewhere.
    if (t.ellipsis < 0 && broadcast_rank > 0)
      fail(errc::invalid_argument, {},
           "the inputs' '...' covers " + std::to_string(broadcast_rank) + " ax" + (broadcast_rank == 1 ? "is" : "es") +
               " but the output term has no '...'");
    return out;
  }

  std::string step(const std::string& type, const std::string& tag, std::vector<std::string> from,
                   const std::string& to = {}, attributes a = {}) const {
    return chain_.step(type, tag, std::move(from), to, std::move(a));
  }

  std::string reshape(const std::string& v, const std::vector<std::int64_t>& dims, const std::string& tag,
                      const std::string& to = {}) const {
    return step("Reshape", tag, {v, chain_.ints(tag + "_shape", dims)}, to);
  }

  // o with its axes in `order` (a permutation of its labels, which are distinct): a Transpose
  // unless they are in order already.
  void permute(operand& o, const std::vector<int>& order, const std::string& tag, const std::string& to = {}) const {
    ints perm;
    std::vector<std::int64_t> dims;
    for (const int l : order) {
      const auto a = std::find(o.labels.begin(), o.labels.end(), l) - o.labels.begin();
      perm.push_back(a);
      dims.push_back(o.dims[static_cast<std::size_t>(a)]);
    }
    o.labels = order;
    o.dims = dims;
    bool identity = true;
    for (std::size_t i = 0; i < perm.size(); ++i) identity = identity && perm[i] == static_cast<std::int64_t>(i);
    if (!identity || !to.empty())
      o.value = step(identity ? "Identity" : "Transpose", tag, {o.value}, to,
                     identity ? attributes{} : attributes{{"perm", perm}});
  }

  // Sums o's axes whose labels are not in `keep` (ReduceSum without keepdims).
  void sum_away(operand& o, const std::vector<int>& keep, const std::string& tag) const {
    ints axes;
    operand kept{o.value, {}, {}};
    for (std::size_t a = 0; a < o.labels.size(); ++a) {
      if (contains(keep, o.labels[a])) {
        kept.labels.push_back(o.labels[a]);
        kept.dims.push_back(o.dims[a]);
      } else {
        axes.push_back(static_cast<std::int64_t>(a));
      }
    }
    if (axes.empty()) return;
    kept.value = step("ReduceSum", tag, {o.value}, {}, {{"axes", axes}, {"keepdims", std::int64_t{0}}});
    o = std::move(kept);
  }

  // Each repeated label of o once, its axes replaced by their diagonal: the pair moved last,
  // merged into one axis of n * n and gathered at 0, n + 1, 2 (n + 1), ...
  void take_diagonals(operand& o, const std::string& tag) const {
    for (std::size_t p = 0; p < o.labels.size(); ++p) {
      const auto q = static_cast<std::size_t>(
          std::find(o.labels.begin() + static_cast<std::ptrdiff_t>(p) + 1, o.labels.end(), o.labels[p]) -
          o.labels.begin());
      if (q == o.labels.size()) continue;
      const int l = o.labels[p];
      const std::int64_t n = o.dims[p];
      ints perm;
      std::vector<int> labels;
      std::vector<std::int64_t> merged;
      for (std::size_t a = 0; a < o.labels.size(); ++a)
        if (a != p && a != q) {
          perm.push_back(static_cast<std::int64_t>(a));
          labels.push_back(o.labels[a]);
          merged.push_back(o.dims[a]);
        }
      const auto axis = static_cast<std::int64_t>(merged.size());
      perm.push_back(static_cast<std::int64_t>(p));
      perm.push_back(static_cast<std::int64_t>(q));
      bool identity = true;
      for (std::size_t i = 0; i < perm.size(); ++i) identity = identity && perm[i] == static_cast<std::int64_t>(i);
      const std::string tag_l = tag + "_diagonal_" + letter_name(l);
      std::string v = identity ? o.value : step("Transpose", tag_l + "_pair_last", {o.value}, {}, {{"perm", perm}});
      merged.push_back(n * n);  // n * n elements of the operand: no overflow
      v = reshape(v, merged, tag_l + "_pair");
      std::vector<std::int64_t> at(static_cast<std::size_t>(n));
      for (std::int64_t k = 0; k < n; ++k) at[static_cast<std::size_t>(k)] = k * (n + 1);
      o.value = step("Gather", tag_l, {v, chain_.ints(tag_l + "_at", at)}, {}, {{"axis", axis}});
      labels.push_back(l);
      merged.back() = n;
      o.labels = std::move(labels);
      o.dims = std::move(merged);
      p = static_cast<std::size_t>(-1);  // again from the start: a third occurrence pairs with the new axis
    }
  }

  static std::string letter_name(int l) {
    return l < letter_count ? letter(l) : "broadcast" + std::to_string(l - letter_count);
  }

  static std::int64_t product(const operand& o, const std::vector<int>& labels) {
    std::int64_t n = 1;
    for (const int l : labels)
      n *= o.dims[static_cast<std::size_t>(std::find(o.labels.begin(), o.labels.end(), l) - o.labels.begin())];
    return n;
  }

  // a and b contracted: the labels both have and `keep` holds are the batch, the ones both have
  // and `keep` does not are summed, the rest are each side's free axes. One batched MatMul
  // [batch, free_a, contracted] x [batch, contracted, free_b], or a broadcasting Mul of
  // [batch, free_a, 1] and [batch, 1, free_b] when nothing is summed.
  operand contract(operand a, operand b, const std::vector<int>& keep, const std::string& tag) const {
    std::vector<int> keep_a = keep, keep_b = keep;
    keep_a.insert(keep_a.end(), b.labels.begin(), b.labels.end());
    keep_b.insert(keep_b.end(), a.labels.begin(), a.labels.end());
    sum_away(a, keep_a, tag + "_sum_a");
    sum_away(b, keep_b, tag + "_sum_b");
    std::vector<int> batch, summed, free_a, free_b;
    for (const int l : a.labels) (contains(b.labels, l) ? (contains(keep, l) ? batch : summed) : free_a).push_back(l);
    for (const int l : b.labels)
      if (!contains(a.labels, l)) free_b.push_back(l);
    const std::int64_t nb = product(a, batch), nfa = product(a, free_a), nfb = product(b, free_b),
                       nk = product(a, summed);
    operand r{{}, batch, {}};
    r.labels.insert(r.labels.end(), free_a.begin(), free_a.end());
    r.labels.insert(r.labels.end(), free_b.begin(), free_b.end());
    if (r.labels.size() > shape::max_rank)
      fail(errc::not_supported, {},
           "contracting left to right leaves " + std::to_string(r.labels.size()) +
               " axes at once; npurt's tensors have at most " + std::to_string(shape::max_rank));
    for (const int l : r.labels) r.dims.push_back(product(contains(a.labels, l) ? a : b, {l}));
    std::int64_t elements = 0;
    if (__builtin_mul_overflow(nb, nfa, &elements) || __builtin_mul_overflow(elements, nfb, &elements))
      fail(errc::invalid_shape, {}, "the contraction's result of " + join(r.dims) + " elements overflows");
    std::vector<int> order_a = batch, order_b = batch;
    order_a.insert(order_a.end(), free_a.begin(), free_a.end());
    order_a.insert(order_a.end(), summed.begin(), summed.end());
    order_b.insert(order_b.end(), summed.begin(), summed.end());
    order_b.insert(order_b.end(), free_b.begin(), free_b.end());
    permute(a, order_a, tag + "_a");
    permute(b, order_b, tag + "_b");
    const auto flat = [&](std::vector<std::int64_t> dims) {
      if (!batch.empty()) dims.insert(dims.begin(), nb);
      return dims;
    };
    const std::string a3 = reshape(a.value, flat({nfa, nk}), tag + "_a_rows");
    const std::string b3 = reshape(b.value, flat({nk, nfb}), tag + "_b_columns");
    const std::string c3 = step(summed.empty() ? "Mul" : "MatMul", tag, {a3, b3});
    r.value = reshape(c3, r.dims, tag + "_axes");
    return r;
  }

  void emit(std::vector<operand> ops, const std::vector<std::int64_t>& letter_size, const std::vector<int>& out,
            const std::vector<std::int64_t>& out_dims, const std::string& y) const {
    // A '...' axis of extent 1 where the broadcast one is wider (or everywhere), and a letter's
    // axis of extent 1 where another operand's is wider, is dropped: the operands then have only
    // axes of their label's full extent (a dropped axis holds one value for every index, which is
    // what broadcasting it means), and the final Reshape restores the output's 1s.
    for (std::size_t i = 0; i < ops.size(); ++i) {
      operand& o = ops[i];
      operand kept{o.value, {}, {}};
      for (std::size_t a = 0; a < o.labels.size(); ++a)
        if (o.dims[a] != 1 || (o.labels[a] < letter_count && letter_size[static_cast<std::size_t>(o.labels[a])] == 1)) {
          kept.labels.push_back(o.labels[a]);
          kept.dims.push_back(o.dims[a]);
        }
      if (kept.labels.size() != o.labels.size()) {
        kept.value = reshape(o.value, kept.dims, "operand" + std::to_string(i) + "_unbroadcast");
        o = std::move(kept);
      }
    }
    for (std::size_t i = 0; i < ops.size(); ++i) {
      const std::string tag = "operand" + std::to_string(i);
      take_diagonals(ops[i], tag);
      // A label no other operand has and the output lacks is summed at once.
      std::vector<int> keep = out;
      for (std::size_t j = 0; j < ops.size(); ++j)
        if (j != i) keep.insert(keep.end(), ops[j].labels.begin(), ops[j].labels.end());
      sum_away(ops[i], keep, tag + "_sum");
    }
    operand acc = std::move(ops[0]);
    for (std::size_t i = 1; i < ops.size(); ++i) {
      std::vector<int> keep = out;
      for (std::size_t j = i + 1; j < ops.size(); ++j)
        keep.insert(keep.end(), ops[j].labels.begin(), ops[j].labels.end());
      acc = contract(std::move(acc), std::move(ops[i]), keep, "contract" + std::to_string(i));
    }
    // The output's labels the result holds (not the dropped extent-1 broadcast axes), in order.
    std::vector<int> order;
    for (const int l : out)
      if (contains(acc.labels, l)) order.push_back(l);
    std::vector<std::int64_t> arranged;
    for (const int l : order) arranged.push_back(product(acc, {l}));
    if (arranged == out_dims) {
      permute(acc, order, "einsum", y);
    } else {
      permute(acc, order, "arranged");
      reshape(acc.value, out_dims, "einsum", y);
    }
  }

  graph& g_;
  const std::string& node_;
  const std::string& equation_;
  const chain_builder& chain_;
};

}  // namespace

void add_einsum(graph& g, const std::string& node_name, const std::vector<std::string>& ins, const std::string& y,
                const attributes& attrs, const chain_builder& chain) {
  if (!attrs.has("equation"))
    throw graph_error(make_error_code(errc::invalid_argument), node_name, y,
                      "Einsum '" + node_name + "' has no equation attribute");
  const std::string equation = attrs.get_string("equation", "");
  einsum_chain(g, node_name, equation, chain).build(ins, y);
}

}  // namespace npurt::detail
