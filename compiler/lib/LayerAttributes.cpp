//===- LayerAttributes.cpp - the normal form and plan as attributes -------===//

#include "linac/Compiler/LayerAttributes.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/Diagnostics.h"

#include <type_traits>

using namespace mlir;
using namespace linac;

namespace {

/// Adds each field of a schema struct to a dictionary, omitting empty
/// optional ones.
struct AttrWriter {
  Builder &builder;
  SmallVector<NamedAttribute> &entries;

  Attribute attr(int64_t value) { return builder.getI64IntegerAttr(value); }
  Attribute attr(bool value) { return builder.getBoolAttr(value); }
  Attribute attr(const std::string &value) {
    return builder.getStringAttr(value);
  }
  Attribute attr(const std::vector<int64_t> &value) {
    return builder.getDenseI64ArrayAttr(value);
  }
  template <typename Enum>
  std::enable_if_t<std::is_enum_v<Enum>, Attribute> attr(Enum value) {
    return builder.getStringAttr(manifest::nameOf(value));
  }

  template <typename T>
  void operator()(const char *key, const T &value, manifest::Bounds = {}) {
    entries.push_back(builder.getNamedAttr(key, attr(value)));
  }
  template <typename T>
  void operator()(const char *key, const std::optional<T> &value,
                  manifest::Bounds = {}) {
    if (value)
      (*this)(key, *value);
  }
};

/// Reads each field of a schema struct from a dictionary; the first field
/// that is missing or of the wrong type is reported and fails the read.
struct AttrReader {
  DictionaryAttr dict;
  StringRef name;
  LayerOp layer;
  bool &ok;

  bool read(Attribute attr, int64_t &out) {
    auto integer = dyn_cast<IntegerAttr>(attr);
    return integer && (out = integer.getInt(), true);
  }
  bool read(Attribute attr, bool &out) {
    auto boolean = dyn_cast<BoolAttr>(attr);
    return boolean && (out = boolean.getValue(), true);
  }
  bool read(Attribute attr, std::string &out) {
    auto string = dyn_cast<StringAttr>(attr);
    return string && (out = string.str(), true);
  }
  bool read(Attribute attr, std::vector<int64_t> &out) {
    auto array = dyn_cast<DenseI64ArrayAttr>(attr);
    return array && (out.assign(array.asArrayRef().begin(),
                                array.asArrayRef().end()),
                     true);
  }
  template <typename Enum>
  std::enable_if_t<std::is_enum_v<Enum>, bool> read(Attribute attr,
                                                    Enum &out) {
    auto string = dyn_cast<StringAttr>(attr);
    std::optional<Enum> value =
        string ? manifest::parse<Enum>(string.getValue().str()) : std::nullopt;
    return value && (out = *value, true);
  }

  static std::string expected(int64_t) { return "an integer"; }
  static std::string expected(bool) { return "true or false"; }
  static std::string expected(const std::string &) { return "a string"; }
  static std::string expected(const std::vector<int64_t> &) {
    return "an array<i64>";
  }
  template <typename Enum>
  static std::enable_if_t<std::is_enum_v<Enum>, std::string> expected(Enum) {
    return manifest::namesOf<Enum>();
  }

  template <typename T>
  void field(const char *key, T &out, bool required) {
    if (!ok)
      return;
    Attribute attr = dict.get(key);
    if (!attr) {
      if (required) {
        layer.emitError() << name << " has no '" << key << "'";
        ok = false;
      }
      return;
    }
    if (!read(attr, out)) {
      layer.emitError() << name << "'s '" << key << "' is " << attr
                        << "; expected " << expected(out);
      ok = false;
    }
  }
  template <typename T>
  void operator()(const char *key, T &out, manifest::Bounds = {}) {
    field(key, out, /*required=*/true);
  }
  template <typename T>
  void operator()(const char *key, std::optional<T> &out,
                  manifest::Bounds = {}) {
    out.reset();
    if (dict.get(key))
      field(key, out.emplace(), /*required=*/true);
  }
};

template <typename Struct>
void setRecord(LayerOp layer, StringRef name, const Struct &record) {
  Builder builder(layer.getContext());
  SmallVector<NamedAttribute> entries;
  Struct::fields(record, AttrWriter{builder, entries});
  layer->setAttr(name, builder.getDictionaryAttr(entries));
}

template <typename Struct>
FailureOr<Struct> getRecord(LayerOp layer, StringRef name, StringRef pass) {
  auto dict = layer->getAttrOfType<DictionaryAttr>(name);
  if (!dict)
    return layer.emitError() << "has no " << name << "; run " << pass
                             << " first";
  Struct record;
  bool ok = true;
  Struct::fields(record, AttrReader{dict, name, layer, ok});
  if (!ok)
    return failure();
  return record;
}

} // namespace

void linac::setNormalForm(LayerOp layer, const manifest::NormalForm &form) {
  setRecord(layer, kNormalFormAttr, form);
}

void linac::setPlan(LayerOp layer, const manifest::Plan &plan) {
  setRecord(layer, kPlanAttr, plan);
}

FailureOr<manifest::NormalForm> linac::getNormalForm(LayerOp layer) {
  return getRecord<manifest::NormalForm>(layer, kNormalFormAttr,
                                         "-linac-normalize");
}

FailureOr<manifest::Plan> linac::getPlan(LayerOp layer) {
  return getRecord<manifest::Plan>(layer, kPlanAttr, "-linac-plan");
}
