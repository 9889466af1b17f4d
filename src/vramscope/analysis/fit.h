// Least-squares line through (x, y): the growth rate and how well a straight line explains it.
#pragma once
#include <cstddef>
#include <span>

namespace vramscope {

struct LineFit {
    double slope = 0;      // y units per x unit
    double intercept = 0;
    double r2 = 0;         // 1: a perfect line; 0: no better than the mean (also for flat data)
};

// Fits ys[first..last] against their index.
LineFit fit_line(std::span<const double> ys, size_t first, size_t last);

}  // namespace vramscope
