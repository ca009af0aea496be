// The stability monitor's pieces on constructed inputs with known answers: ops::max_abs (strided views,
// f32/f64, NaN) and the spike detector's window statistics.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "backend/ops.hpp"
#include "test_util.hpp"
#include "train/monitor.hpp"

namespace sinklab {
namespace {

TEST(MaxAbs, KnownAnswersOnViewsAndDtypes) {
  for (DType dt : {DType::f32, DType::f64}) {
    test::Owned x(dt, {3, 5});  // odd sizes
    for (int64_t i = 0; i < 15; ++i) ops::fill(x.t.slice(0, i / 5, 1).slice(1, i % 5, 1), 0.25 * double(i) - 1.0);
    EXPECT_DOUBLE_EQ(ops::max_abs(x.t), 2.5);                          // element 14: 0.25 * 14 - 1
    ops::fill(x.t.slice(0, 1, 1).slice(1, 2, 1), -7.0);
    EXPECT_DOUBLE_EQ(ops::max_abs(x.t), 7.0);                          // a negative maximum
    EXPECT_DOUBLE_EQ(ops::max_abs(x.t.slice(1, 3, 2)), 2.5);            // columns 3..4: strided rows
    EXPECT_DOUBLE_EQ(ops::max_abs(x.t.slice(0, 0, 1)), 1.0);            // row 0: -1, -0.75, ..., 0
    ops::fill(x.t.slice(0, 2, 1).slice(1, 0, 1), std::numeric_limits<double>::quiet_NaN());
    EXPECT_TRUE(std::isnan(ops::max_abs(x.t)));                        // wherever the NaN sits
    EXPECT_DOUBLE_EQ(ops::max_abs(x.t.slice(0, 0, 2)), 7.0);
  }
}

TEST(SpikeDetector, FlagsValuesAboveMeanPlusKSigmaOfAFullWindow) {
  train::SpikeDetector d(3.0, 4);
  double mean = 0, std = 0;
  // Not a spike while the window fills, however large.
  for (double v : {1.0, 3.0, 1.0, 3.0}) EXPECT_FALSE(d.observe(v, &mean, &std));
  EXPECT_TRUE(std::isnan(mean));
  // Window {1,3,1,3}: mean 2, population std 1; the threshold is 2 + 3 * 1 = 5.
  EXPECT_FALSE(d.observe(5.0, &mean, &std));
  EXPECT_DOUBLE_EQ(mean, 2.0);
  EXPECT_DOUBLE_EQ(std, 1.0);
  // Window {3,1,3,5}: mean 3, std sqrt(2); 3 + 3 sqrt(2) = 7.243.
  EXPECT_TRUE(d.observe(7.25, &mean, &std));
  EXPECT_DOUBLE_EQ(mean, 3.0);
  EXPECT_DOUBLE_EQ(std, std::sqrt(2.0));
  // Non-finite values are never spikes and do not enter the window: {1,3,5,7.25} stays.
  EXPECT_FALSE(d.observe(std::numeric_limits<double>::quiet_NaN(), &mean, &std));
  EXPECT_FALSE(d.observe(std::numeric_limits<double>::infinity(), &mean, &std));
  EXPECT_DOUBLE_EQ(mean, (1.0 + 3.0 + 5.0 + 7.25) / 4);
}

}  // namespace
}  // namespace sinklab
