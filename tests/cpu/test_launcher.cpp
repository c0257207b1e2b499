// The launcher's environment (src/comm/launcher.h) and the rendezvous address derived from it
// (src/comm/rendezvous.h): every launcher's variables, precedence, the one-node fallback, Slurm's
// task list, malformed values and a missing MASTER_ADDR. Never reads the real environment.
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <string>

#include "comm/launcher.h"
#include "comm/rendezvous.h"
#include "ringpack/error.h"

namespace ringpack {
namespace {

using Vars = std::map<std::string, std::string>;

std::optional<LauncherEnv> read(const Vars& vars) {
  return read_launcher_env([&vars](const char* name) -> const char* {
    const auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

// The message of the Error that reading `vars` throws ("" when it does not throw).
std::string read_error(const Vars& vars) {
  try {
    read(vars);
  } catch (const Error& error) {
    return error.what();
  }
  return "";
}

TEST(Launcher, NoLauncherVariablesMeansNoLauncher) {
  EXPECT_FALSE(read({}).has_value());
  EXPECT_FALSE(read({{"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}}).has_value());
  EXPECT_FALSE(read({{"RANK", ""}, {"WORLD_SIZE", ""}}).has_value());  // empty counts as unset
}

TEST(Launcher, Torchrun) {
  const auto env = read({{"RANK", "5"},
                         {"WORLD_SIZE", "8"},
                         {"LOCAL_RANK", "1"},
                         {"LOCAL_WORLD_SIZE", "4"},
                         {"MASTER_ADDR", "node0"},
                         {"MASTER_PORT", "29500"}});
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->launcher, "torchrun");
  EXPECT_EQ(env->rank, 5);
  EXPECT_EQ(env->world_size, 8);
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->local_world_size, 4);
  EXPECT_EQ(env->master_addr, "node0");
  EXPECT_EQ(env->master_port, 29500);
  EXPECT_EQ(describe(*env), "rank 5 of 8 (torchrun)");
}

TEST(Launcher, OpenMpi) {
  const auto env = read({{"OMPI_COMM_WORLD_RANK", "3"},
                         {"OMPI_COMM_WORLD_SIZE", "4"},
                         {"OMPI_COMM_WORLD_LOCAL_RANK", "3"},
                         {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}});
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->launcher, "mpirun");
  EXPECT_EQ(env->rank, 3);
  EXPECT_EQ(env->world_size, 4);
  EXPECT_EQ(env->local_rank, 3);
  EXPECT_EQ(env->local_world_size, 4);
  EXPECT_EQ(env->master_addr, "");
  EXPECT_EQ(env->master_port, 0);
}

TEST(Launcher, Pmi) {
  const auto env = read(
      {{"PMI_RANK", "2"}, {"PMI_SIZE", "6"}, {"MPI_LOCALRANKID", "0"}, {"MPI_LOCALNRANKS", "2"}});
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->launcher, "pmi");
  EXPECT_EQ(env->rank, 2);
  EXPECT_EQ(env->world_size, 6);
  EXPECT_EQ(env->local_rank, 0);
  EXPECT_EQ(env->local_world_size, 2);
}

TEST(Launcher, SlurmWithTaskList) {
  // Nodes of 2, 2, 2 and 1 tasks; this task is the last one, alone on node 3.
  const auto env = read({{"SLURM_PROCID", "6"},
                         {"SLURM_NTASKS", "7"},
                         {"SLURM_LOCALID", "0"},
                         {"SLURM_NODEID", "3"},
                         {"SLURM_TASKS_PER_NODE", "2(x3),1"}});
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->launcher, "slurm");
  EXPECT_EQ(env->rank, 6);
  EXPECT_EQ(env->world_size, 7);
  EXPECT_EQ(env->local_rank, 0);
  EXPECT_EQ(env->local_world_size, 1);

  const auto first = read({{"SLURM_PROCID", "1"},
                           {"SLURM_NTASKS", "7"},
                           {"SLURM_LOCALID", "1"},
                           {"SLURM_NODEID", "0"},
                           {"SLURM_TASKS_PER_NODE", "2(x3),1"}});
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(first->local_world_size, 2);
}

TEST(Launcher, WithoutLocalVariablesOneNodeIsAssumed) {
  const auto env = read({{"RANK", "1"}, {"WORLD_SIZE", "2"}});
  ASSERT_TRUE(env.has_value());
  EXPECT_EQ(env->local_rank, 1);
  EXPECT_EQ(env->local_world_size, 2);
}

TEST(Launcher, TorchrunWinsOverMpirunAndMpirunOverSlurm) {
  const auto torchrun = read({{"RANK", "1"},
                              {"WORLD_SIZE", "2"},
                              {"OMPI_COMM_WORLD_RANK", "0"},
                              {"OMPI_COMM_WORLD_SIZE", "1"},
                              {"SLURM_PROCID", "0"},
                              {"SLURM_NTASKS", "1"}});
  ASSERT_TRUE(torchrun.has_value());
  EXPECT_EQ(torchrun->launcher, "torchrun");
  EXPECT_EQ(torchrun->rank, 1);

  const auto mpirun = read({{"OMPI_COMM_WORLD_RANK", "2"},
                            {"OMPI_COMM_WORLD_SIZE", "3"},
                            {"SLURM_PROCID", "0"},
                            {"SLURM_NTASKS", "1"}});
  ASSERT_TRUE(mpirun.has_value());
  EXPECT_EQ(mpirun->launcher, "mpirun");
  EXPECT_EQ(mpirun->rank, 2);
  EXPECT_EQ(mpirun->world_size, 3);
}

TEST(Launcher, MalformedValuesNameTheVariableAndValue) {
  std::string message = read_error({{"RANK", "one"}, {"WORLD_SIZE", "2"}});
  EXPECT_NE(message.find("RANK='one' is not a whole number"), std::string::npos) << message;

  message = read_error({{"RANK", "0"}, {"WORLD_SIZE", "2 "}});
  EXPECT_NE(message.find("WORLD_SIZE='2 ' is not a whole number"), std::string::npos) << message;

  message = read_error({{"OMPI_COMM_WORLD_RANK", "-1"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
  EXPECT_NE(message.find("OMPI_COMM_WORLD_RANK=-1 is negative"), std::string::npos) << message;

  message = read_error({{"PMI_RANK", "4"}, {"PMI_SIZE", "4"}});
  EXPECT_NE(message.find("PMI_RANK=4 is not below PMI_SIZE=4"), std::string::npos) << message;

  message = read_error({{"RANK", "0"}, {"WORLD_SIZE", "0"}});
  EXPECT_NE(message.find("WORLD_SIZE=0 is out of range"), std::string::npos) << message;

  message = read_error({{"RANK", "0"}, {"WORLD_SIZE", "99999999999999999999"}});
  EXPECT_NE(message.find("WORLD_SIZE=99999999999999999999 is out of range"), std::string::npos)
      << message;

  message = read_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "http"}});
  EXPECT_NE(message.find("MASTER_PORT='http' is not a whole number"), std::string::npos) << message;

  message = read_error({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "65535"}});
  EXPECT_NE(message.find("MASTER_PORT=65535 is out of range"), std::string::npos) << message;
  EXPECT_NE(message.find("1..65534"), std::string::npos) << message;

  message = read_error(
      {{"RANK", "0"}, {"WORLD_SIZE", "4"}, {"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "2"}});
  EXPECT_NE(message.find("LOCAL_RANK=2 is not below the 2 processes of this node"),
            std::string::npos)
      << message;

  message = read_error({{"SLURM_PROCID", "0"},
                        {"SLURM_NTASKS", "2"},
                        {"SLURM_LOCALID", "0"},
                        {"SLURM_TASKS_PER_NODE", "2(3)"}});
  EXPECT_NE(message.find("SLURM_TASKS_PER_NODE='2(3)' is malformed"), std::string::npos) << message;
}

TEST(Launcher, RankWithoutSizeIsAnError) {
  std::string message = read_error({{"RANK", "1"}});
  EXPECT_NE(message.find("RANK=1 is set but WORLD_SIZE is not"), std::string::npos) << message;
  message = read_error({{"OMPI_COMM_WORLD_SIZE", "2"}});
  EXPECT_NE(message.find("OMPI_COMM_WORLD_SIZE=2 is set but OMPI_COMM_WORLD_RANK is not"),
            std::string::npos)
      << message;
}

TEST(Launcher, DeviceIsLocalRankModuloDeviceCount) {
  LauncherEnv env;
  env.launcher = "torchrun";
  env.world_size = 16;
  env.local_world_size = 8;
  env.rank = 13;
  env.local_rank = 5;
  EXPECT_EQ(launcher_device(env, 8), 5);
  EXPECT_EQ(launcher_device(env, 1), 0);
  EXPECT_EQ(launcher_device(env, 2), 1);
  EXPECT_THROW(launcher_device(env, 0), Error);
}

TEST(Launcher, RendezvousIsMasterAddrAndNextPort) {
  const auto env = read(
      {{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}});
  ASSERT_TRUE(env.has_value());
  const RendezvousConfig config = rendezvous_config(*env, 7.0);
  EXPECT_EQ(config.address, "127.0.0.1");
  EXPECT_EQ(config.port, 29501);
  EXPECT_EQ(config.rank, 1);
  EXPECT_EQ(config.world_size, 2);
  EXPECT_EQ(config.timeout_seconds, 7.0);
}

TEST(Launcher, MissingMasterAddrIsAClearError) {
  const auto env = read({{"OMPI_COMM_WORLD_RANK", "1"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
  ASSERT_TRUE(env.has_value());
  try {
    rendezvous_config(*env, 1.0);
    FAIL() << "a missing MASTER_ADDR must throw";
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find("rank 1 of 2 (mpirun): MASTER_ADDR is not set"), std::string::npos)
        << message;
    EXPECT_NE(message.find("export MASTER_ADDR=127.0.0.1 MASTER_PORT=29500"), std::string::npos)
        << message;
    EXPECT_NE(message.find("-x MASTER_ADDR -x MASTER_PORT"), std::string::npos) << message;
  }

  const auto no_port = read({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "node0"}});
  ASSERT_TRUE(no_port.has_value());
  try {
    rendezvous_config(*no_port, 1.0);
    FAIL() << "a missing MASTER_PORT must throw";
  } catch (const Error& error) {
    EXPECT_NE(std::string(error.what()).find("MASTER_PORT is not set"), std::string::npos)
        << error.what();
  }
}

}  // namespace
}  // namespace ringpack
