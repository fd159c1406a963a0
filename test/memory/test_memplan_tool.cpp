// npurt-memplan as a user runs it: exit status, messages, and what it refuses.
#include <catch2/catch_test_macros.hpp>

#include "../tool_run.hpp"

#include <cerrno>
#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>

namespace fs = std::filesystem;

namespace {

using tool_test::q;
using tool_test::result;
using tool_test::scratch;
using tool_test::slurp;

void write(const fs::path& p, const std::string& text) { std::ofstream(p) << text; }

result run(const std::string& args, const std::string& stdout_to = "") {
  return tool_test::run(NPURT_MEMPLAN_TOOL, args, stdout_to);
}

const std::string example = std::string(NPURT_MEMPLAN_DATA) + "/paper_example.csv";

}  // namespace

TEST_CASE("npurt-memplan plans, writes the plan, and --check accepts it", "[memory][memplan][tool]") {
  const auto plan = scratch() / "plan.csv";
  auto r = run(q(example) + " --output " + q(plan.string()));
  CHECK(r.status == 0);
  CHECK(r.out.find("lower bound  124 bytes") != std::string::npos);
  CHECK(r.out.find("check        valid") != std::string::npos);
  r = run(q(example) + " --check " + q(plan.string()));
  CHECK(r.status == 0);
  CHECK(r.out.find("check        valid") != std::string::npos);
}

TEST_CASE("npurt-memplan --check rejects plans that do not match the input", "[memory][memplan][tool]") {
  const auto plan = scratch() / "bad-plan.csv";
  SECTION("missing rows") {
    write(plan, "id,lower,upper,size,offset\n0,0,2,32,0\n1,1,5,28,32\n");
    const auto r = run(q(example) + " --check " + q(plan.string()));
    CHECK(r.status == 1);
    CHECK(r.out.find("INVALID: the plan lacks buffer 2") != std::string::npos);
  }
  SECTION("no rows at all") {
    write(plan, "id,lower,upper,size,offset\n");
    const auto r = run(q(example) + " --check " + q(plan.string()));
    CHECK(r.status == 1);
    CHECK(r.out.find("no rows") != std::string::npos);
  }
  SECTION("changed sizes") {
    write(plan,
          "id,lower,upper,size,offset\n0,0,2,1,0\n1,1,5,1,1\n2,2,6,1,2\n3,3,6,1,3\n4,4,6,1,4\n5,5,8,1,5\n"
          "6,6,9,1,6\n7,7,9,1,7\n");
    const auto r = run(q(example) + " --check " + q(plan.string()));
    CHECK(r.status == 1);
    CHECK(r.out.find("INVALID: buffer 0") != std::string::npos);
  }
  SECTION("no offset column") {
    const auto r = run(q(example) + " --check " + q(example));
    CHECK(r.status == 1);
    CHECK(r.err.find("no offset column") != std::string::npos);
  }
}

TEST_CASE("npurt-memplan reports unreadable input and failed writes with a non-zero status",
          "[memory][memplan][tool]") {
  SECTION("an endless line") {
    const auto r = run("/dev/zero");
    CHECK(r.status == 1);
    CHECK(r.err.find("line 1: line longer than") != std::string::npos);
    CHECK(r.err.size() < 200);
  }
  SECTION("a 5 MB field is not echoed whole") {
    const auto in = scratch() / "huge.csv";
    std::string text = "id,lower,upper,size\n0,0,1,";
    text.append(5'000'000, 'q');
    write(in, text + "\n");
    const auto r = run(q(in.string()));
    CHECK(r.status == 1);
    CHECK(r.err.size() < 300);
  }
  SECTION("standard output on a full device") {
    const auto r = run(q(example), "/dev/full");
    CHECK(r.status == 1);
    CHECK(r.err.find("cannot write to standard output") != std::string::npos);
  }
  SECTION("the plan file on a full device") {
    const auto r = run(q(example) + " --output /dev/full");
    CHECK(r.status == 1);
    CHECK(r.err.find("cannot write /dev/full: No space left on device") != std::string::npos);
  }
  SECTION("files that cannot be opened say why") {
    auto r = run(q((scratch() / "no_such_input.csv").string()));
    CHECK(r.status == 1);
    CHECK(r.err.find("no_such_input.csv: cannot open file: No such file or directory") != std::string::npos);
    r = run(q(example) + " --output " + q((scratch() / "no_such_dir" / "plan.csv").string()));
    CHECK(r.status == 1);
    CHECK(r.err.find("plan.csv for writing: No such file or directory") != std::string::npos);
  }
}

TEST_CASE("npurt-memplan's command line: --help, and bad values are clear errors", "[memory][memplan][tool]") {
  auto r = run("--help");
  CHECK(r.status == 0);
  CHECK(r.out.find("--check") != std::string::npos);
  r = run(q(example) + " --alignment 48");
  CHECK(r.status != 0);
  CHECK(r.err.find("power of two") != std::string::npos);
  r = run(q(example) + " --search-work -5");
  CHECK(r.status != 0);
  CHECK(r.err.find("'-5'") != std::string::npos);
  r = run(q(example) + " --search-work abc");
  CHECK(r.status != 0);
  r = run("");
  CHECK(r.status != 0);
  CHECK(r.err.find("input") != std::string::npos);
}

TEST_CASE("npurt-memplan given a directory says it cannot read it and exits 1", "[memory][memplan][tool]") {
  // A file stream throws when read(2) fails on a directory: that must become a message, not abort.
  auto r = run(q(scratch().string()));
  CHECK(r.status == 1);
  CHECK(r.err.find("cannot read file: " + std::generic_category().message(EISDIR)) != std::string::npos);
  r = run(q(example) + " --check " + q(scratch().string()));
  CHECK(r.status == 1);
  CHECK(r.err.find("cannot read file") != std::string::npos);
}
