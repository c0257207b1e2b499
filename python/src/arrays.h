// DLPack arrays (nb::ndarray) as the library's raw tensors: element type, shape and device checks
// with one-line errors that name the argument, the value and the fix (docs/python.md).
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "ringpack/dtype.h"

namespace ringpack::python {

namespace nb = nanobind;
using Array = nb::ndarray<>;

enum class Element { kF32, kBF16, kF16, kI32, kOther };

// Where an array lives: the CPU or one CUDA device.
struct Place {
  bool cuda = false;
  int device = 0;
  bool operator==(const Place& other) const {
    return cuda == other.cuda && (!cuda || device == other.device);
  }
};

// One checked argument: a C-contiguous array with its element type and shape.
struct View {
  const char* name = "";
  void* data = nullptr;
  Element element = Element::kOther;
  std::vector<int64_t> shape;
  Place place;

  int dim(size_t i) const { return int(shape.at(i)); }
  int64_t count() const;
};

// Throws nb::type_error (element type, device) or nb::value_error (not C-contiguous, too large).
View view(const Array& array, const char* name);

const char* element_name(Element element);
// The attention dtype of q/k/v-like arrays: fp32, bf16 or fp16, else nb::type_error.
DType attention_dtype(const View& v);

// nb::type_error unless v's element type is `element`.
void expect_element(const View& v, Element element);
// nb::value_error unless v.shape == shape (a -1 entry matches any size).
void expect_shape(const View& v, std::initializer_list<int64_t> shape);
// nb::value_error unless every view lives where `first` does.
void expect_same_place(const View& first, std::initializer_list<const View*> others);

std::string shape_string(const std::vector<int64_t>& shape);

}  // namespace ringpack::python
