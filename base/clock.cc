#include "base/clock.h"

namespace kvtrain {
namespace {

class RealClock : public Clock {
 public:
  TimePoint Now() const override { return std::chrono::steady_clock::now(); }
};

}  // namespace

const Clock* Clock::Real() {
  static const RealClock* const real = new RealClock();
  return real;
}

}  // namespace kvtrain
