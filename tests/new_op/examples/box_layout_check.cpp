// A [K, 6] member of the RoI family (batch, cx, cy, w, h, angle) with a parameter of its own
// (Params: clockwise): each bin reads the pixel at the rounded centre plus the angle column, negated
// when clockwise (so every column and the parameter reach the math); forward and backward run
// through the family's CPU drivers; the batch-index check strides 6 values a row.
#include <cstdio>
#include <string_view>
#include <vector>

#include "common/roi_family_cpu.h"

namespace opkiln::kernels {
struct CentreAngle {
  static constexpr bool kIndex = false;
  static constexpr std::int64_t kBoxColumns = 6;
  static constexpr std::string_view kBoxLayout = "batch index, cx, cy, w, h, angle";
  struct Params {
    bool clockwise = false;
  };
  template <typename Acc> struct Roi { bool valid = false; std::int64_t batch = 0, offset = 0; Acc angle = 0; };
  template <typename Acc, typename Round>
  static Roi<Acc> roi(Acc b, Acc cx, Acc cy, Acc w, Acc h, Acc angle, const RoiFamilyGeometryWith<Params>& g,
                      Round) {
    Roi<Acc> r;
    if (!batch_index_valid(b, g.batch)) return r;
    r.valid = true;
    r.batch = static_cast<std::int64_t>(b);
    r.offset = static_cast<std::int64_t>(cy) * g.width + static_cast<std::int64_t>(cx);
    r.angle = (g.params.clockwise ? -angle : angle) + Acc(0) * (w + h);
    return r;
  }
  template <typename Acc> struct Tap { std::int64_t offset; };
  template <typename Acc, typename Round, typename F>
  static void taps(const Roi<Acc>& r, std::int64_t, std::int64_t, const RoiFamilyGeometryWith<Params>&, Round,
                   F&& f) {
    f(Tap<Acc>{r.offset});
  }
  template <typename Acc> using State = Acc;
  template <typename Acc> static State<Acc> start(const Roi<Acc>&) { return Acc(0); }
  template <typename Acc, typename Load>
  static void fold(State<Acc>& s, const Tap<Acc>& t, Load&& load) { s += load(t.offset); }
  template <typename Acc>
  static RoiValue<Acc> finish(const Roi<Acc>& r, const State<Acc>& s) { return {s + r.angle, -1}; }
  template <typename Acc> static Acc grad(const Roi<Acc>&, Acc g) { return g; }
  template <typename Acc, typename Add> static void scatter(const Tap<Acc>& t, Acc g, Add&& add) { add(t.offset, g); }
};
}  // namespace opkiln::kernels
OPKILN_ROI_FAMILY_CPU(CentreAngle);

int main() {
  using namespace opkiln::kernels;
  static_assert(kBoxColumns<CentreAngle> == 6 && kBoxLayout<CentreAngle> == "batch index, cx, cy, w, h, angle");
  RoiGeometry<CentreAngle> g;
  g.params.clockwise = true;
  g.batch = 2, g.channels = 1, g.height = 3, g.width = 4, g.rois = 3, g.pooled_height = 1, g.pooled_width = 1;
  std::vector<float> input(2 * 3 * 4);
  for (std::size_t i = 0; i < input.size(); ++i) input[i] = static_cast<float>(i);
  // (b, cx, cy, w, h, angle): image 1 at (x 2, y 1); image 0 at (x 3, y 2); a bad batch index
  std::vector<float> rois{1, 2, 1, 9, 9, 0.5f, 0, 3, 2, 9, 9, 0.25f, 5, 0, 0, 1, 1, 0};
  std::vector<float> out(3, -1);
  roi_family_forward_cpu<CentreAngle>(ScalarKind::Float32, g, input.data(), rois.data(), out.data(), nullptr, 0, 3);
  std::vector<float> grad_out{1, 2, 3}, grad_in(input.size(), -1);
  roi_family_backward_cpu<CentreAngle>(ScalarKind::Float32, g, grad_out.data(), rois.data(), nullptr, grad_in.data(),
                                       0, 2);
  const std::int64_t bad = first_bad_roi_cpu(ScalarKind::Float32, rois.data(), 3, 6, 2);
  float sum = 0;
  for (float v : grad_in) sum += v;
  std::printf("%g %g %g %g %g %g %lld\n", out[0], out[1], out[2], grad_in[12 + 6], grad_in[11], sum,
              static_cast<long long>(bad));
}
