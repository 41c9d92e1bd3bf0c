// Roster: admission, refusal reasons, progress and rank order, for the two
// kinds of group the transports keep.
#include "net/roster.h"

#include <gtest/gtest.h>

namespace kvtrain {
namespace net {
namespace {

RosterEntry At(int group, int rank, const std::string& host, int port,
               const std::string& conn) {
  return RosterEntry{group, rank, host, port, conn};
}

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

TEST(RosterTest, AddressOrderIsNumericThenNamesThenPort) {
  EXPECT_TRUE(AddressBefore("127.0.0.2", 9, "127.0.0.10", 1));
  EXPECT_TRUE(AddressBefore("10.0.0.1", 5, "10.0.0.1", 6));
  EXPECT_TRUE(AddressBefore("10.0.0.1", 5, "a-host", 1));
  EXPECT_TRUE(AddressBefore("a-host", 5, "b-host", 1));
  EXPECT_FALSE(AddressBefore("10.0.0.1", 6, "10.0.0.1", 6));
  EXPECT_FALSE(AddressBefore("b-host", 1, "a-host", 5));
}

TEST(RosterTest, RolesAreFilledAndRankedByAddress) {
  Roster r({{"server", 2, false}, {"worker", 2, false}});
  EXPECT_EQ(r.Progress(), "0 of 2 servers, 0 of 2 workers");
  EXPECT_EQ(r.Registered(8), "none");
  EXPECT_EQ(r.Add(At(1, -1, "10.0.0.10", 5, "a")), "");
  EXPECT_EQ(r.Add(At(0, -1, "10.0.0.2", 7, "b")), "");
  EXPECT_EQ(r.Add(At(1, -1, "10.0.0.9", 5, "c")), "");
  EXPECT_FALSE(r.complete());
  EXPECT_EQ(r.Progress(), "1 of 2 servers, 2 of 2 workers");
  EXPECT_EQ(r.Registered(1), "worker at 10.0.0.10:5 and 2 more");
  // A repeat is harmless; the same connection cannot register twice.
  EXPECT_EQ(r.Add(At(1, -1, "10.0.0.10", 5, "a")), Roster::kRepeat);
  EXPECT_TRUE(Has(r.Add(At(1, -1, "10.0.0.10", 6, "a")),
                  "this connection already registered worker at 10.0.0.10:5"));
  // A third worker, and an address taken, are refused with the reason.
  EXPECT_EQ(r.Add(At(1, -1, "10.0.0.11", 5, "d")), "the job already has 2 workers");
  EXPECT_TRUE(Has(r.Add(At(0, -1, "10.0.0.9", 5, "e")),
                  "another node already registered as 10.0.0.9:5 (worker at"));
  EXPECT_EQ(r.Add(At(0, -1, "10.0.0.1", 1, "f")), "");
  EXPECT_TRUE(r.complete());
  EXPECT_EQ(r.Add(At(0, -1, "10.0.0.3", 1, "g")),
            "the job already has all its nodes (2 servers, 2 workers)");
  std::string note = "stale";
  const auto ranked = r.Ranked(&note);
  EXPECT_EQ(note, "");
  ASSERT_EQ(ranked.size(), 2u);
  EXPECT_EQ(ranked[0], (std::vector<size_t>{3, 1}));  // 10.0.0.1, 10.0.0.2
  EXPECT_EQ(ranked[1], (std::vector<size_t>{2, 0}));  // .9 before .10
}

TEST(RosterTest, AskedRanksHoldOnlyWhenExactlyZeroToN) {
  Roster exact({{"worker", 3, false}});
  EXPECT_EQ(exact.Add(At(0, 2, "10.0.0.1", 1, "a")), "");
  EXPECT_EQ(exact.Add(At(0, 0, "10.0.0.2", 1, "b")), "");
  EXPECT_EQ(exact.Add(At(0, 1, "10.0.0.3", 1, "c")), "");
  std::string note;
  EXPECT_EQ(exact.Ranked(&note)[0], (std::vector<size_t>{1, 2, 0}));
  EXPECT_EQ(note, "");

  Roster twice({{"worker", 2, false}});
  EXPECT_EQ(twice.Add(At(0, 0, "10.0.0.2", 1, "a")), "");
  EXPECT_EQ(twice.Add(At(0, 0, "10.0.0.1", 1, "b")), "");
  EXPECT_EQ(twice.Ranked(&note)[0], (std::vector<size_t>{1, 0}));
  EXPECT_TRUE(Has(note, "requested worker ranks are not exactly 0..1 (rank 0 from "));
}

TEST(RosterTest, GivenRanksAreCheckedAndNamedWhenMissing) {
  Roster r({{"rank", 4, true}});
  EXPECT_EQ(r.Add(At(0, 4, "h", 1, "a")), "rank 4 is not in [0, 4)");
  EXPECT_EQ(r.Add(At(0, -1, "h", 1, "a")), "rank -1 is not in [0, 4)");
  EXPECT_EQ(r.Add(At(0, 2, "h", 1, "a")), "");
  EXPECT_EQ(r.Add(At(0, 2, "h", 2, "b")), "rank 2 registered twice: by h:1 and by h:2");
  EXPECT_TRUE(Has(r.Add(At(0, 3, "h", 1, "a")),
                  "this connection already registered rank 2 at h:1; it cannot register "
                  "rank 3 at h:1"));
  EXPECT_EQ(r.Add(At(0, 0, "h", 3, "c")), "");
  EXPECT_EQ(r.MissingRanks(0), "1, 3");
  EXPECT_EQ(r.Add(At(0, 3, "h", 4, "d")), "");
  EXPECT_EQ(r.Add(At(0, 1, "h", 5, "e")), "");
  EXPECT_TRUE(r.complete());
  EXPECT_EQ(r.MissingRanks(0), "");
  EXPECT_EQ(r.Ranked(nullptr)[0], (std::vector<size_t>{1, 3, 0, 2}));
}

TEST(RosterTest, EntriesWithoutAnAddressOrGroupAreRefused) {
  Roster r({{"rank", 2, true}});
  EXPECT_TRUE(Has(r.Add(At(1, 0, "h", 1, "a")), "group 1 is not one of the job's 1"));
  EXPECT_TRUE(Has(r.Add(At(0, 0, "", 1, "a")), "no address"));
  EXPECT_TRUE(Has(r.Add(At(0, 0, "h", 0, "a")), "no address"));
  EXPECT_TRUE(Has(r.Add(At(0, 0, "h", 70000, "a")), "no address"));
  EXPECT_EQ(r.count(0), 0);
}

}  // namespace
}  // namespace net
}  // namespace kvtrain
