#include "analysis/fit.h"

namespace vramscope {

LineFit fit_line(std::span<const double> ys, size_t first, size_t last) {
    LineFit f;
    if (last >= ys.size() || last <= first) return f;
    const double n = double(last - first + 1);
    double sx = 0, sy = 0;
    for (size_t i = first; i <= last; ++i) {
        sx += double(i);
        sy += ys[i];
    }
    const double mx = sx / n, my = sy / n;
    double sxx = 0, sxy = 0, syy = 0;
    for (size_t i = first; i <= last; ++i) {
        const double dx = double(i) - mx, dy = ys[i] - my;
        sxx += dx * dx;
        sxy += dx * dy;
        syy += dy * dy;
    }
    if (sxx == 0) return f;
    f.slope = sxy / sxx;
    f.intercept = my - f.slope * mx;
    f.r2 = syy > 0 ? (sxy * sxy) / (sxx * syy) : 0;
    return f;
}

}  // namespace vramscope
