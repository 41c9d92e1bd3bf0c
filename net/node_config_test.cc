#include "net/node_config.h"

#include <gtest/gtest.h>

namespace kvtrain {
namespace {

std::map<std::string, std::string> ValidWorker() {
  return {{"DMLC_ROLE", "worker"},
          {"DMLC_PS_ROOT_URI", "10.0.0.1"},
          {"DMLC_PS_ROOT_PORT", "9091"},
          {"DMLC_NUM_WORKER", "2"},
          {"DMLC_NUM_SERVER", "3"}};
}

std::string ErrorFor(std::map<std::string, std::string> vars) {
  StatusOr<NodeConfig> c = NodeConfig::FromEnv(MapEnv(std::move(vars)));
  EXPECT_FALSE(c.ok());
  return c.ok() ? "" : c.status().message();
}

TEST(NodeConfigTest, ParsesAValidWorkerWithDefaults) {
  StatusOr<NodeConfig> c = NodeConfig::FromEnv(MapEnv(ValidWorker()));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->role, Role::kWorker);
  EXPECT_EQ(c->root_uri, "10.0.0.1");
  EXPECT_EQ(c->root_port, 9091);
  EXPECT_EQ(c->num_workers, 2);
  EXPECT_EQ(c->num_servers, 3);
  EXPECT_EQ(c->interface, "");
  EXPECT_EQ(c->node_host, "");
  EXPECT_EQ(c->node_port, 0);
  EXPECT_EQ(c->verbose, 0);
  EXPECT_DOUBLE_EQ(c->heartbeat_interval_s, 1.0);
  EXPECT_DOUBLE_EQ(c->heartbeat_timeout_s, 10.0);
  EXPECT_DOUBLE_EQ(c->startup_timeout_s, 60.0);
  EXPECT_EQ(c->DebugString(), "worker (root 10.0.0.1:9091, 2 workers, 3 servers)");
}

TEST(NodeConfigTest, ParsesEveryOptionalVariable) {
  auto vars = ValidWorker();
  vars["DMLC_ROLE"] = "server";
  vars["DMLC_PS_ROOT_URI"] = "scheduler.example";
  vars["DMLC_INTERFACE"] = "eth1";
  vars["DMLC_NODE_HOST"] = "10.0.0.7";
  vars["DMLC_NODE_PORT"] = "41233";
  vars["PS_VERBOSE"] = "2";
  vars["PS_HEARTBEAT_INTERVAL"] = "0.5";
  vars["PS_HEARTBEAT_TIMEOUT"] = "3";
  vars["KVTRAIN_STARTUP_TIMEOUT"] = "5";
  vars["DMLC_NUM_SERVER"] = "0";
  vars["DMLC_RANK"] = "3";
  StatusOr<NodeConfig> c = NodeConfig::FromEnv(MapEnv(vars));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->role, Role::kServer);
  EXPECT_EQ(c->root_uri, "scheduler.example");
  EXPECT_EQ(c->interface, "eth1");
  EXPECT_EQ(c->node_host, "10.0.0.7");
  EXPECT_EQ(c->node_port, 41233);
  EXPECT_EQ(c->verbose, 2);
  EXPECT_DOUBLE_EQ(c->heartbeat_interval_s, 0.5);
  EXPECT_DOUBLE_EQ(c->heartbeat_timeout_s, 3);
  EXPECT_DOUBLE_EQ(c->startup_timeout_s, 5);
  EXPECT_EQ(c->num_servers, 0);
  EXPECT_EQ(c->requested_rank, 3);
}

TEST(NodeConfigTest, SchedulerMayPickItsPort) {
  auto vars = ValidWorker();
  vars["DMLC_ROLE"] = "scheduler";
  vars["DMLC_PS_ROOT_PORT"] = "0";
  vars["KVTRAIN_SCHEDULER_PORT_FILE"] = "/tmp/port";
  StatusOr<NodeConfig> c = NodeConfig::FromEnv(MapEnv(vars));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->root_port, 0);
  EXPECT_EQ(c->scheduler_port_file, "/tmp/port");
  EXPECT_EQ(c->requested_rank, -1);
}

TEST(NodeConfigTest, EveryRole) {
  for (const char* role : {"scheduler", "server", "worker"}) {
    auto vars = ValidWorker();
    vars["DMLC_ROLE"] = role;
    StatusOr<NodeConfig> c = NodeConfig::FromEnv(MapEnv(vars));
    ASSERT_TRUE(c.ok());
    EXPECT_STREQ(RoleName(c->role), role);
  }
}

TEST(NodeConfigTest, HeartbeatsCanBeTurnedOff) {
  auto vars = ValidWorker();
  vars["PS_HEARTBEAT_INTERVAL"] = "0";
  vars["PS_HEARTBEAT_TIMEOUT"] = "0.5";
  StatusOr<NodeConfig> c = NodeConfig::FromEnv(MapEnv(vars));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->heartbeat_interval_s, 0);
}

TEST(NodeConfigTest, MissingRequiredVariablesAreNamed) {
  for (const char* name : {"DMLC_ROLE", "DMLC_PS_ROOT_URI", "DMLC_PS_ROOT_PORT",
                           "DMLC_NUM_WORKER", "DMLC_NUM_SERVER"}) {
    auto vars = ValidWorker();
    vars.erase(name);
    const std::string msg = ErrorFor(vars);
    EXPECT_EQ(msg.rfind(std::string(name) + " is not set: ", 0), 0u) << msg;
    EXPECT_NE(msg.find("tracker/launch.py"), std::string::npos) << msg;
  }
  EXPECT_FALSE(NodeConfig::InDistributedJob(MapEnv({})));
  EXPECT_TRUE(NodeConfig::InDistributedJob(MapEnv(ValidWorker())));
}

TEST(NodeConfigTest, MalformedValuesNameVariableValueAndExpectation) {
  struct Case {
    const char* name;
    const char* value;
    const char* message;
  };
  const Case cases[] = {
      {"DMLC_ROLE", "master",
       "DMLC_ROLE=\"master\": expected scheduler, server or worker"},
      {"DMLC_PS_ROOT_PORT", "http", "DMLC_PS_ROOT_PORT=\"http\": expected an "
                                    "integer in [0, 65535]"},
      {"DMLC_PS_ROOT_PORT", "70000", "DMLC_PS_ROOT_PORT=\"70000\": expected an "
                                     "integer in [0, 65535]"},
      {"DMLC_PS_ROOT_PORT", "0", "DMLC_PS_ROOT_PORT=\"0\": only the scheduler may "
                                 "pick its own port; servers and workers need the port "
                                 "it listens on"},
      {"DMLC_RANK", "first", "DMLC_RANK=\"first\": expected an integer in [0, 65535]"},
      {"DMLC_NUM_WORKER", "two", "DMLC_NUM_WORKER=\"two\": expected an "
                                 "integer in [1, 65535]"},
      {"DMLC_NUM_WORKER", "0", "DMLC_NUM_WORKER=\"0\": expected an integer "
                               "in [1, 65535]"},
      {"DMLC_NUM_SERVER", "-1", "DMLC_NUM_SERVER=\"-1\": expected an integer "
                                "in [0, 65535]"},
      {"DMLC_NODE_PORT", "x", "DMLC_NODE_PORT=\"x\": expected an integer in "
                              "[0, 65535]"},
      {"PS_VERBOSE", "3", "PS_VERBOSE=\"3\": expected an integer in [0, 2]"},
      {"PS_HEARTBEAT_INTERVAL", "fast",
       "PS_HEARTBEAT_INTERVAL=\"fast\": expected a number of seconds in [0, "
       "3600]"},
      {"PS_HEARTBEAT_TIMEOUT", "-2",
       "PS_HEARTBEAT_TIMEOUT=\"-2\": expected a number of seconds in [0.01, "
       "86400]"},
      {"KVTRAIN_STARTUP_TIMEOUT", "soon",
       "KVTRAIN_STARTUP_TIMEOUT=\"soon\": expected a number of seconds in "
       "[0.01, 86400]"},
  };
  for (const Case& c : cases) {
    auto vars = ValidWorker();
    vars[c.name] = c.value;
    EXPECT_EQ(ErrorFor(vars), c.message) << c.name;
  }
}

TEST(NodeConfigTest, HeartbeatTimeoutMustExceedInterval) {
  auto vars = ValidWorker();
  vars["PS_HEARTBEAT_INTERVAL"] = "2";
  vars["PS_HEARTBEAT_TIMEOUT"] = "1";
  EXPECT_EQ(ErrorFor(vars),
            "PS_HEARTBEAT_TIMEOUT=1 must be larger than PS_HEARTBEAT_INTERVAL=2");
}

}  // namespace
}  // namespace kvtrain
