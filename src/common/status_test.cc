#include "common/status.h"

#include <gtest/gtest.h>

namespace tessera {
namespace {

TEST(StatusTest, OkAndContext) {
  EXPECT_TRUE(Status::Ok().ok());
  Status s = InvalidArgument("must be >= 1, got -2").WithContext("spec.tasks[0].replicas");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.ToString(), "InvalidArgument: spec.tasks[0].replicas: must be >= 1, got -2");
  EXPECT_FALSE(s.retryable());
  EXPECT_TRUE(Unavailable("store down").retryable());
}

TEST(StatusOrTest, HoldsValueOrError) {
  StatusOr<int> v = 7;
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(*v, 7);
  StatusOr<int> e = NotFound("queue \"ml\" does not exist");
  EXPECT_FALSE(e.ok());
  EXPECT_EQ(e.status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace tessera
