#include "arrays.h"

#include <limits>

namespace ringpack::python {
namespace {

Element element_of(const nb::dlpack::dtype& dtype) {
  const auto code = nb::dlpack::dtype_code(dtype.code);
  if (dtype.lanes != 1) return Element::kOther;
  if (code == nb::dlpack::dtype_code::Float && dtype.bits == 32) return Element::kF32;
  if (code == nb::dlpack::dtype_code::Float && dtype.bits == 16) return Element::kF16;
  if (code == nb::dlpack::dtype_code::Bfloat && dtype.bits == 16) return Element::kBF16;
  if (code == nb::dlpack::dtype_code::Int && dtype.bits == 32) return Element::kI32;
  return Element::kOther;
}

}  // namespace

int64_t View::count() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

std::string shape_string(const std::vector<int64_t>& shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    out += (i ? ", " : "") + (shape[i] < 0 ? std::string("*") : std::to_string(shape[i]));
  }
  return out + "]";
}

const char* element_name(Element element) {
  switch (element) {
    case Element::kF32:
      return "float32";
    case Element::kBF16:
      return "bfloat16";
    case Element::kF16:
      return "float16";
    case Element::kI32:
      return "int32";
    case Element::kOther:
      break;
  }
  return "an unsupported element type";
}

View view(const Array& array, const char* name) {
  View v;
  v.name = name;
  v.data = array.data();
  v.element = element_of(array.dtype());
  v.shape.resize(array.ndim());
  for (size_t i = 0; i < array.ndim(); ++i) v.shape[i] = int64_t(array.shape(i));
  const int device_type = array.device_type();
  if (device_type == nb::device::cuda::value) {
    v.place = {true, array.device_id()};
  } else if (device_type != nb::device::cpu::value) {
    throw nb::type_error((std::string(name) +
                          " lives on a device ringpack cannot use (DLPack "
                          "device type " +
                          std::to_string(device_type) + "); pass a CPU or CUDA array")
                             .c_str());
  }
  int64_t expected = 1;
  for (size_t i = array.ndim(); i-- > 0;) {
    if (array.shape(i) != 1 && array.stride(i) != expected) {
      throw nb::value_error((std::string(name) + " of shape " + shape_string(v.shape) +
                             " is not contiguous; pass .contiguous() (row-major) data")
                                .c_str());
    }
    expected *= int64_t(array.shape(i));
  }
  for (int64_t s : v.shape) {
    if (s > std::numeric_limits<int32_t>::max()) {
      throw nb::value_error((std::string(name) + " has a dimension of " + std::to_string(s) +
                             " elements; ringpack takes at most 2^31 - 1 per dimension")
                                .c_str());
    }
  }
  return v;
}

DType attention_dtype(const View& v) {
  switch (v.element) {
    case Element::kF32:
      return DType::kF32;
    case Element::kBF16:
      return DType::kBF16;
    case Element::kF16:
      return DType::kF16;
    default:
      throw nb::type_error((std::string(v.name) + " has element type " + element_name(v.element) +
                            "; pass float32, bfloat16 or float16")
                               .c_str());
  }
}

void expect_element(const View& v, Element element) {
  if (v.element == element) return;
  throw nb::type_error((std::string(v.name) + " has element type " + element_name(v.element) +
                        "; it must be " + element_name(element))
                           .c_str());
}

void expect_shape(const View& v, std::initializer_list<int64_t> shape) {
  bool match = v.shape.size() == shape.size();
  size_t i = 0;
  for (int64_t s : shape) {
    if (match && s >= 0 && v.shape[i] != s) match = false;
    ++i;
  }
  if (match) return;
  throw nb::value_error((std::string(v.name) + " has shape " + shape_string(v.shape) +
                         "; expected " + shape_string(std::vector<int64_t>(shape)))
                            .c_str());
}

void expect_same_place(const View& first, std::initializer_list<const View*> others) {
  auto where = [](const Place& p) {
    return p.cuda ? "cuda:" + std::to_string(p.device) : std::string("cpu");
  };
  for (const View* other : others) {
    if (other->place == first.place) continue;
    throw nb::value_error((std::string(other->name) + " is on " + where(other->place) + " but " +
                           first.name + " is on " + where(first.place) +
                           "; put every tensor of the call on one device")
                              .c_str());
  }
}

}  // namespace ringpack::python
