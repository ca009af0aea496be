#include "io/torch_pickle.hpp"

#include <cstring>
#include <map>
#include <memory>
#include <utility>

#include "core/error.hpp"

namespace sinklab::io {

namespace {

// The globals a state dict needs, and what each one means here.
enum class Global { ordered_dict, rebuild_tensor_v2, rebuild_parameter, storage_type };

struct AllowedGlobal {
  const char* module;
  const char* name;
  Global kind;
  const char* dtype;  // storage types only
};

constexpr AllowedGlobal kAllowed[] = {
    {"collections", "OrderedDict", Global::ordered_dict, nullptr},
    {"torch._utils", "_rebuild_tensor_v2", Global::rebuild_tensor_v2, nullptr},
    {"torch._utils", "_rebuild_parameter", Global::rebuild_parameter, nullptr},
    {"torch", "FloatStorage", Global::storage_type, "float32"},
    {"torch", "DoubleStorage", Global::storage_type, "float64"},
    {"torch", "HalfStorage", Global::storage_type, "float16"},
    {"torch", "BFloat16Storage", Global::storage_type, "bfloat16"},
    {"torch", "IntStorage", Global::storage_type, "int32"},
    {"torch", "LongStorage", Global::storage_type, "int64"},
    {"torch", "ShortStorage", Global::storage_type, "int16"},
    {"torch", "CharStorage", Global::storage_type, "int8"},
    {"torch", "ByteStorage", Global::storage_type, "uint8"},
    {"torch", "BoolStorage", Global::storage_type, "bool"},
};

// One value on the unpickler's stack. Containers are shared (the memo and the stack may both hold
// one; SETITEMS on a memoised dict must change what the memo refers to).
struct Value;
using Ref = std::shared_ptr<Value>;
struct Value {
  enum class Kind { none, boolean, integer, floating, string, bytes, tuple, list, dict, global, storage, tensor };
  Kind kind = Kind::none;
  int64_t i = 0;
  double f = 0.0;
  std::string s;                           // string, bytes
  std::vector<Ref> items;                  // tuple, list
  std::vector<std::pair<Ref, Ref>> pairs;  // dict, in insertion order
  const AllowedGlobal* global = nullptr;   // global
  PickledTensor tensor;                    // storage (key, dtype, numel), tensor
};

const char* kind_name(Value::Kind k) {
  switch (k) {
    case Value::Kind::none: return "None";
    case Value::Kind::boolean: return "bool";
    case Value::Kind::integer: return "int";
    case Value::Kind::floating: return "float";
    case Value::Kind::string: return "str";
    case Value::Kind::bytes: return "bytes";
    case Value::Kind::tuple: return "tuple";
    case Value::Kind::list: return "list";
    case Value::Kind::dict: return "dict";
    case Value::Kind::global: return "global";
    case Value::Kind::storage: return "storage";
    case Value::Kind::tensor: return "tensor";
  }
  return "?";
}

Ref make(Value::Kind k) {
  auto v = std::make_shared<Value>();
  v->kind = k;
  return v;
}

class Unpickler {
 public:
  Unpickler(std::string_view bytes, const std::string& where) : b_(bytes), where_(where) {}

  // Runs the opcodes up to STOP and returns the one value left. The opcodes come in the groups of
  // Python's pickletools (framing, the stack, constants, containers, the memo, objects); each group's
  // function returns false for an opcode that is not its own.
  Ref run() {
    while (true) {
      const size_t at = pos_;
      const uint8_t op = take_u8();
      if (op == '.') {  // STOP
        SL_CHECK(stack_.size() == 1 && marks_.empty(), "%s: malformed pickle (STOP with %zu values on the stack)",
                 where_.c_str(), stack_.size());
        return stack_.back();
      }
      if (framing_op(op) || stack_op(op) || constant_op(op, at) || container_op(op) || memo_op(op, at) ||
          object_op(op, at))
        continue;
      SL_FAIL("%s: refused pickle opcode 0x%02x at byte %zu (not one torch.save writes for a state dict)",
              where_.c_str(), unsigned(op), at);
    }
  }

 private:
  // ---- the opcodes, by group ---------------------------------------------------------------------------
  bool framing_op(uint8_t op) {
    switch (op) {
      case 0x80: take_u8(); return true;  // PROTO n
      case 0x95: take(8); return true;    // FRAME n (protocol 4): the frames are read as one stream
      default: return false;
    }
  }

  bool stack_op(uint8_t op) {
    switch (op) {
      case '(': marks_.push_back(stack_.size()); return true;  // MARK
      case '0': pop(); return true;                             // POP
      case '2': push(top()); return true;                       // DUP
      default: return false;
    }
  }

  // None, booleans, integers, floats, strings and bytes.
  bool constant_op(uint8_t op, size_t at) {
    switch (op) {
      case 'N': push(make(Value::Kind::none)); return true;
      case 0x88: push(boolean(true)); return true;           // NEWTRUE
      case 0x89: push(boolean(false)); return true;          // NEWFALSE
      case 'J': push(integer(int32_t(le(4)))); return true;  // BININT
      case 'K': push(integer(int64_t(le(1)))); return true;  // BININT1
      case 'M': push(integer(int64_t(le(2)))); return true;  // BININT2
      case 0x8a: {                                           // LONG1: n bytes, little-endian two's complement
        const size_t n = take_u8();
        SL_CHECK(n <= 8, "%s: integer of %zu bytes at byte %zu (sinklab reads 64-bit integers)", where_.c_str(), n, at);
        uint64_t v = n ? le(n) : 0;
        if (n > 0 && n < 8 && (v >> (8 * n - 1)) & 1) v |= ~uint64_t(0) << (8 * n);  // sign-extend
        push(integer(int64_t(v)));
        return true;
      }
      case 'G': {  // BINFLOAT: big-endian double
        const std::string_view d = take(8);
        uint64_t bits = 0;
        for (char c : d) bits = (bits << 8) | uint8_t(c);
        auto v = make(Value::Kind::floating);
        std::memcpy(&v->f, &bits, 8);
        push(v);
        return true;
      }
      case 'X': push(text(Value::Kind::string, le(4))); return true;   // BINUNICODE
      case 0x8c: push(text(Value::Kind::string, le(1))); return true;  // SHORT_BINUNICODE
      case 0x8d: push(text(Value::Kind::string, le(8))); return true;  // BINUNICODE8
      case 'T': push(text(Value::Kind::bytes, le(4))); return true;    // BINSTRING
      case 'U': push(text(Value::Kind::bytes, le(1))); return true;    // SHORT_BINSTRING
      case 'B': push(text(Value::Kind::bytes, le(4))); return true;    // BINBYTES
      case 'C': push(text(Value::Kind::bytes, le(1))); return true;    // SHORT_BINBYTES
      default: return false;
    }
  }

  // Tuples, lists and dicts, and adding to them.
  bool container_op(uint8_t op) {
    switch (op) {
      case ')': push(make(Value::Kind::tuple)); return true;  // EMPTY_TUPLE
      case ']': push(make(Value::Kind::list)); return true;   // EMPTY_LIST
      case '}': push(make(Value::Kind::dict)); return true;   // EMPTY_DICT
      case 't': push(tuple(pop_mark())); return true;         // TUPLE
      case 0x85: push(tuple(pop_n(1))); return true;          // TUPLE1
      case 0x86: push(tuple(pop_n(2))); return true;          // TUPLE2
      case 0x87: push(tuple(pop_n(3))); return true;          // TUPLE3
      case 'l': {                                             // LIST
        auto v = make(Value::Kind::list);
        v->items = pop_mark();
        push(v);
        return true;
      }
      case 'd': {  // DICT
        auto v = make(Value::Kind::dict);
        set_items(v, pop_mark());
        push(v);
        return true;
      }
      case 'a': {  // APPEND
        Ref item = pop();
        expect(top(), Value::Kind::list, "APPEND")->items.push_back(item);
        return true;
      }
      case 'e': {  // APPENDS
        std::vector<Ref> items = pop_mark();
        Ref list = expect(top(), Value::Kind::list, "APPENDS");
        list->items.insert(list->items.end(), items.begin(), items.end());
        return true;
      }
      case 's': {  // SETITEM
        std::vector<Ref> kv = pop_n(2);
        set_items(expect(top(), Value::Kind::dict, "SETITEM"), kv);
        return true;
      }
      case 'u': {  // SETITEMS
        std::vector<Ref> kv = pop_mark();
        set_items(expect(top(), Value::Kind::dict, "SETITEMS"), kv);
        return true;
      }
      default: return false;
    }
  }

  bool memo_op(uint8_t op, size_t at) {
    switch (op) {
      case 'q': memo_[le(1)] = top(); return true;          // BINPUT
      case 'r': memo_[le(4)] = top(); return true;          // LONG_BINPUT
      case 0x94: memo_[memo_.size()] = top(); return true;  // MEMOIZE
      case 'h': push(recall(le(1), at)); return true;       // BINGET
      case 'j': push(recall(le(4), at)); return true;       // LONG_BINGET
      default: return false;
    }
  }

  // Globals (resolved against kAllowed only), persistent ids, calls and BUILD.
  bool object_op(uint8_t op, size_t at) {
    switch (op) {
      case 'c': {  // GLOBAL "module\nname\n"
        const std::string module = line(), name = line();
        push(global(module, name));
        return true;
      }
      case 0x93: {  // STACK_GLOBAL
        std::vector<Ref> mn = pop_n(2);
        SL_CHECK(mn[0]->kind == Value::Kind::string && mn[1]->kind == Value::Kind::string,
                 "%s: malformed pickle (STACK_GLOBAL of non-strings at byte %zu)", where_.c_str(), at);
        push(global(mn[0]->s, mn[1]->s));
        return true;
      }
      case 'Q': push(persistent(pop(), at)); return true;  // BINPERSID
      case 'R': {                                          // REDUCE: callable(*args)
        std::vector<Ref> fa = pop_n(2);
        push(reduce(fa[0], fa[1], at));
        return true;
      }
      case 'b': {  // BUILD: obj.__setstate__(state)
        Ref state = pop();
        Ref obj = top();
        // An OrderedDict's state is its __dict__ (a state dict's _metadata): kept out of the tensors.
        SL_CHECK(obj->kind == Value::Kind::dict && (state->kind == Value::Kind::dict || state->kind == Value::Kind::none),
                 "%s: refused pickle BUILD of a %s with a %s at byte %zu (a state dict builds only dicts)",
                 where_.c_str(), kind_name(obj->kind), kind_name(state->kind), at);
        return true;
      }
      default: return false;
    }
  }

  // ---- reading bytes --------------------------------------------------------------------------------
  std::string_view take(uint64_t n) {
    SL_CHECK(n <= b_.size() - pos_, "%s: truncated pickle (%llu bytes wanted at byte %zu of %zu)", where_.c_str(),
             (unsigned long long)n, pos_, b_.size());
    std::string_view s = b_.substr(pos_, size_t(n));
    pos_ += size_t(n);
    return s;
  }
  uint8_t take_u8() { return uint8_t(take(1)[0]); }
  uint64_t le(size_t n) {
    const std::string_view s = take(n);
    uint64_t v = 0;
    for (size_t k = n; k-- > 0;) v = (v << 8) | uint8_t(s[k]);
    return v;
  }
  std::string line() {
    const size_t end = b_.find('\n', pos_);
    SL_CHECK(end != std::string_view::npos && end - pos_ < 256, "%s: malformed pickle (GLOBAL name at byte %zu)",
             where_.c_str(), pos_);
    std::string s(b_.substr(pos_, end - pos_));
    pos_ = end + 1;
    return s;
  }

  // ---- the stack --------------------------------------------------------------------------------------
  void push(Ref v) { stack_.push_back(std::move(v)); }
  Ref top() const {
    SL_CHECK(stack_.size() > (marks_.empty() ? 0 : marks_.back()), "%s: malformed pickle (stack underflow at byte %zu)",
             where_.c_str(), pos_);
    return stack_.back();
  }
  Ref pop() {
    Ref v = top();
    stack_.pop_back();
    return v;
  }
  std::vector<Ref> pop_n(size_t n) {
    const size_t floor = marks_.empty() ? 0 : marks_.back();
    SL_CHECK(stack_.size() >= floor + n, "%s: malformed pickle (stack underflow at byte %zu)", where_.c_str(), pos_);
    std::vector<Ref> out(stack_.end() - long(n), stack_.end());
    stack_.resize(stack_.size() - n);
    return out;
  }
  std::vector<Ref> pop_mark() {
    SL_CHECK(!marks_.empty(), "%s: malformed pickle (no MARK at byte %zu)", where_.c_str(), pos_);
    const size_t m = marks_.back();
    marks_.pop_back();
    std::vector<Ref> out(stack_.begin() + long(m), stack_.end());
    stack_.resize(m);
    return out;
  }
  Ref recall(uint64_t i, size_t at) {
    auto it = memo_.find(i);
    SL_CHECK(it != memo_.end(), "%s: malformed pickle (memo %llu unset at byte %zu)", where_.c_str(),
             (unsigned long long)i, at);
    return it->second;
  }
  Ref expect(Ref v, Value::Kind k, const char* op) {
    SL_CHECK(v->kind == k, "%s: malformed pickle (%s on a %s at byte %zu)", where_.c_str(), op, kind_name(v->kind), pos_);
    return v;
  }

  // ---- values ------------------------------------------------------------------------------------------
  static Ref boolean(bool b) {
    Ref v = make(Value::Kind::boolean);
    v->i = b;
    return v;
  }
  static Ref integer(int64_t i) {
    Ref v = make(Value::Kind::integer);
    v->i = i;
    return v;
  }
  Ref text(Value::Kind k, uint64_t n) {
    Ref v = make(k);
    v->s = std::string(take(n));
    return v;
  }
  static Ref tuple(std::vector<Ref> items) {
    Ref v = make(Value::Kind::tuple);
    v->items = std::move(items);
    return v;
  }
  void set_items(const Ref& dict, const std::vector<Ref>& kv) {
    SL_CHECK(kv.size() % 2 == 0, "%s: malformed pickle (odd number of dict items at byte %zu)", where_.c_str(), pos_);
    for (size_t k = 0; k < kv.size(); k += 2) {
      bool replaced = false;
      if (kv[k]->kind == Value::Kind::string)
        for (auto& p : dict->pairs)
          if (p.first->kind == Value::Kind::string && p.first->s == kv[k]->s) {
            p.second = kv[k + 1];
            replaced = true;
          }
      if (!replaced) dict->pairs.emplace_back(kv[k], kv[k + 1]);
    }
  }

  // The only place a name from the file is resolved: against kAllowed, nothing else.
  Ref global(const std::string& module, const std::string& name) {
    for (const AllowedGlobal& g : kAllowed)
      if (module == g.module && name == g.name) {
        Ref v = make(Value::Kind::global);
        v->global = &g;
        return v;
      }
    std::string shown = module + "." + name;
    for (char& c : shown)
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';  // one line
    SL_FAIL("%s: refused pickle global '%s' (a state dict needs only collections.OrderedDict, "
            "torch._utils._rebuild_tensor_v2, torch._utils._rebuild_parameter and torch.*Storage; nothing was run)",
            where_.c_str(), shown.c_str());
  }

  // ('storage', torch.<T>Storage, key, location, numel) -> a storage record.
  Ref persistent(const Ref& pid, size_t at) {
    const auto& t = pid->items;
    SL_CHECK(pid->kind == Value::Kind::tuple && t.size() == 5 && t[0]->kind == Value::Kind::string &&
                 t[0]->s == "storage" && t[1]->kind == Value::Kind::global &&
                 t[1]->global->kind == Global::storage_type && t[2]->kind == Value::Kind::string &&
                 t[3]->kind == Value::Kind::string && t[4]->kind == Value::Kind::integer && t[4]->i >= 0,
             "%s: refused persistent id at byte %zu (expected ('storage', torch.<T>Storage, key, location, numel))",
             where_.c_str(), at);
    Ref v = make(Value::Kind::storage);
    v->tensor.dtype = t[1]->global->dtype;
    v->tensor.storage_key = t[2]->s;
    v->tensor.storage_numel = uint64_t(t[4]->i);
    return v;
  }

  std::vector<int64_t> int_tuple(const Ref& v, const char* what, size_t at) {
    SL_CHECK(v->kind == Value::Kind::tuple || v->kind == Value::Kind::list, "%s: tensor %s is a %s at byte %zu",
             where_.c_str(), what, kind_name(v->kind), at);
    std::vector<int64_t> out;
    for (const Ref& x : v->items) {
      SL_CHECK(x->kind == Value::Kind::integer, "%s: tensor %s holds a %s at byte %zu", where_.c_str(), what,
               kind_name(x->kind), at);
      out.push_back(x->i);
    }
    return out;
  }
  bool empty_hooks(const Ref& v) const {
    return v->kind == Value::Kind::none || (v->kind == Value::Kind::dict && v->pairs.empty());
  }

  Ref reduce(const Ref& callable, const Ref& args, size_t at) {
    SL_CHECK(callable->kind == Value::Kind::global && args->kind == Value::Kind::tuple,
             "%s: refused pickle REDUCE of a %s at byte %zu", where_.c_str(), kind_name(callable->kind), at);
    const auto& a = args->items;
    switch (callable->global->kind) {
      case Global::ordered_dict:
        SL_CHECK(a.empty(), "%s: refused OrderedDict(...) with arguments at byte %zu", where_.c_str(), at);
        return make(Value::Kind::dict);
      case Global::rebuild_tensor_v2: {
        SL_CHECK((a.size() == 6 || a.size() == 7) && a[0]->kind == Value::Kind::storage &&
                     a[1]->kind == Value::Kind::integer && a[4]->kind == Value::Kind::boolean && empty_hooks(a[5]) &&
                     (a.size() == 6 || empty_hooks(a[6])),
                 "%s: refused _rebuild_tensor_v2 arguments at byte %zu (expected storage, offset, size, stride, "
                 "requires_grad, no hooks, no metadata)", where_.c_str(), at);
        Ref v = make(Value::Kind::tensor);
        v->tensor = a[0]->tensor;
        v->tensor.storage_offset = a[1]->i;
        v->tensor.shape = int_tuple(a[2], "size", at);
        v->tensor.strides = int_tuple(a[3], "stride", at);
        SL_CHECK(v->tensor.shape.size() == v->tensor.strides.size(), "%s: tensor with %zu sizes and %zu strides at byte %zu",
                 where_.c_str(), v->tensor.shape.size(), v->tensor.strides.size(), at);
        return v;
      }
      case Global::rebuild_parameter:
        SL_CHECK(a.size() == 3 && a[0]->kind == Value::Kind::tensor && a[1]->kind == Value::Kind::boolean &&
                     empty_hooks(a[2]),
                 "%s: refused _rebuild_parameter arguments at byte %zu (expected tensor, requires_grad, no hooks)",
                 where_.c_str(), at);
        return a[0];
      case Global::storage_type: break;
    }
    SL_FAIL("%s: refused pickle call of torch.%s at byte %zu (storage types appear in persistent ids only)",
            where_.c_str(), callable->global->name, at);
  }

  std::string_view b_;
  const std::string& where_;
  size_t pos_ = 0;
  std::vector<Ref> stack_;
  std::vector<size_t> marks_;
  std::map<uint64_t, Ref> memo_;
};

}  // namespace

int torch_dtype_size(const std::string& dtype) {
  static const std::map<std::string, int> sizes = {{"float32", 4}, {"float64", 8}, {"float16", 2}, {"bfloat16", 2},
                                                   {"int32", 4},   {"int64", 8},   {"int16", 2},   {"int8", 1},
                                                   {"uint8", 1},   {"bool", 1}};
  auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

std::vector<PickledTensor> read_torch_state_dict(std::string_view pickle, const std::string& where) {
  Ref top = Unpickler(pickle, where).run();
  SL_CHECK(top->kind == Value::Kind::dict, "%s: the pickle holds a %s, not a state dict ({name: tensor})",
           where.c_str(), kind_name(top->kind));
  std::vector<PickledTensor> out;
  for (const auto& [k, v] : top->pairs) {
    SL_CHECK(k->kind == Value::Kind::string, "%s: a state dict key is a %s, not a name", where.c_str(), kind_name(k->kind));
    SL_CHECK(v->kind == Value::Kind::tensor, "%s: state dict entry '%s' is a %s, not a tensor", where.c_str(),
             k->s.c_str(), kind_name(v->kind));
    out.push_back(v->tensor);
    out.back().name = k->s;
  }
  return out;
}

}  // namespace sinklab::io
