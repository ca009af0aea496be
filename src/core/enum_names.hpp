// The text of an enum's values, one table per enum, read both ways: a flag's value and its --help list,
// the value config.json keeps, the word an error message uses.
#pragma once

#include <cstddef>
#include <string>

#include "core/error.hpp"

namespace sinklab {

template <class E>
struct EnumName {
  E value;
  const char* name;
  const char* note = nullptr;  // said after the name where --help lists the values, e.g. "(Tables 6, 15)"
};

// The name of `value` ("?" for a value the table lacks).
template <class E, size_t N>
const char* enum_name(const EnumName<E> (&names)[N], E value) {
  for (const EnumName<E>& n : names)
    if (n.value == value) return n.name;
  return "?";
}

// "a | b | c", in the table's order; with_notes: each note after its name ("a | b (note) | c").
template <class E, size_t N>
std::string enum_name_list(const EnumName<E> (&names)[N], bool with_notes = false) {
  std::string list;
  for (const EnumName<E>& n : names) {
    list.append(list.empty() ? "" : " | ").append(n.name);
    if (with_notes && n.note) list.append(" ").append(n.note);
  }
  return list;
}

// The value named `text`; throws "--<flag>: '<text>' is not one of a | b | c".
template <class E, size_t N>
E parse_enum(const EnumName<E> (&names)[N], const std::string& text, const char* flag) {
  for (const EnumName<E>& n : names)
    if (text == n.name) return n.value;
  SL_FAIL("--%s: '%s' is not one of %s", flag, text.c_str(), enum_name_list(names).c_str());
}

}  // namespace sinklab
