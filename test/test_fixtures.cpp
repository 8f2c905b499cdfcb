// Framework fixtures: runs tools/deeprnn-run in-process on every case in
// test/data (made by PyTorch 1.13 and ONNX 1.12's reference implementation,
// see tools/make_fixtures.py) and compares each output file.
//
// Tolerance: both sides compute in float32 with different summation orders
// and activation implementations; with sizes <= 9 and values <= ~1 that is a
// few ulp (~1e-6). We require max |error| <= 1e-5, and exact zeros where the
// framework wrote exact zeros (padded steps).
#include <boost/test/unit_test.hpp>

#include <dirent.h>
#include <unistd.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "deeprnn.hpp"

int deeprnn_run_main(int argc, char** argv);

#ifndef DEEPRNN_TEST_DATA
#define DEEPRNN_TEST_DATA "test/data"
#endif

namespace {

std::vector<std::string> lines(const std::string& path) {
    std::ifstream f(path);
    std::vector<std::string> out;
    for (std::string line; std::getline(f, line);)
        if (!line.empty()) out.push_back(line);
    return out;
}

std::vector<std::string> files_in(const std::string& dir) {
    std::vector<std::string> out;
    if (DIR* d = opendir(dir.c_str())) {
        while (dirent* e = readdir(d))
            if (e->d_name[0] != '.') out.push_back(e->d_name);
        closedir(d);
    }
    return out;
}

std::string temp_dir() {
    char tmpl[] = "/tmp/deeprnn_fixture_XXXXXX";
    const char* d = mkdtemp(tmpl);
    BOOST_REQUIRE(d != nullptr);
    return d;
}

int run_tool(std::vector<std::string> args) {
    args.insert(args.begin(), "deeprnn-run");
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(&a[0]);
    return deeprnn_run_main(static_cast<int>(argv.size()), argv.data());
}

}  // namespace

BOOST_AUTO_TEST_SUITE(framework_fixtures)

// One run of deeprnn-run with a case's argument file (paths in it are
// relative to the case directory), against the case's expected outputs.
void check_run(const std::string& dir, const std::string& args_file) {
    std::istringstream words(lines(dir + "/" + args_file).at(0));
    std::vector<std::string> args;
    for (std::string w; words >> w;) {
        const bool path = !args.empty() && (args.back() == "--weights" || args.back() == "--input" || args.back() == "--onnx" ||
                                            args.back() == "--lengths" || args.back() == "--h0" || args.back() == "--c0");
        args.push_back(path ? dir + "/" + w : w);
    }
    const std::string out = temp_dir();
    args.push_back("--out");
    args.push_back(out);
    BOOST_REQUIRE_EQUAL(run_tool(args), 0);
    const auto expected = files_in(dir + "/expected");
    BOOST_REQUIRE(!expected.empty());
    BOOST_TEST(files_in(out).size() == expected.size(), "deeprnn-run wrote a different set of files");
    for (const auto& file : expected) {
        const deeprnn::Tensor want = deeprnn::load_npy(dir + "/expected/" + file);
        const deeprnn::Tensor got = deeprnn::load_npy(out + "/" + file);
        BOOST_TEST(got.shape == want.shape, file << " shape");
        if (got.shape != want.shape) continue;
        double max_err = 0;
        bool zeros_kept = true;
        for (size_t i = 0; i < want.data.size(); ++i) {
            max_err = std::max(max_err, static_cast<double>(std::fabs(got.data[i] - want.data[i])));
            if (want.data[i] == 0.0f && got.data[i] != 0.0f) zeros_kept = false;
        }
        BOOST_TEST(max_err <= 1e-5, file << ": max abs error " << max_err);
        BOOST_TEST(zeros_kept, file << ": a zero (padded step) became non-zero");
        std::remove((out + "/" + file).c_str());
    }
    rmdir(out.c_str());
}

// Tolerance 1e-5 absolute: the fixtures' framework outputs agree with a
// float64 reference within 1e-5 (tools/make_fixtures.py asserts it), and
// deeprnn's float32 kernels and 2.2-ulp activations stay within that on
// these tiny shapes (|outputs| < 1, at most 7 steps).
BOOST_AUTO_TEST_CASE(every_case_matches_its_framework) {
    const std::string root = DEEPRNN_TEST_DATA;
    const auto cases = lines(root + "/MANIFEST");
    BOOST_REQUIRE_MESSAGE(cases.size() >= 30, "MANIFEST lists " << cases.size() << " cases");
    int from_onnx_files = 0;
    for (const auto& name : cases) {
        BOOST_TEST_CONTEXT("case " << name) {
            check_run(root + "/" + name, "args");
            // The onnx cases again, from the operator in a model file (load_onnx),
            // which carries the cell, direction, clip, gates and GRU variant the flags give.
            if (std::ifstream(root + "/" + name + "/args_onnx")) {
                check_run(root + "/" + name, "args_onnx");
                ++from_onnx_files;
            }
        }
    }
    BOOST_TEST(from_onnx_files >= 15);
}

// Files PyTorch's own exporter wrote (stacks: one operator a layer, with
// Squeeze or Transpose + Reshape between them), against the module's own
// outputs. Tolerance 1e-5 absolute, as above (both sides float32).
BOOST_AUTO_TEST_CASE(pytorch_onnx_exports_run_as_the_module_does) {
    const std::string root = std::string(DEEPRNN_TEST_DATA) + "/onnx_export";
    const auto cases = files_in(root);
    BOOST_REQUIRE(cases.size() >= 3);
    for (const auto& name : cases) BOOST_TEST_CONTEXT("export " << name) check_run(root + "/" + name, "args_onnx");
}

BOOST_AUTO_TEST_CASE(cli_reports_conflicts_and_bad_flags) {
    const std::string dir = std::string(DEEPRNN_TEST_DATA) + "/torch_lstm_2layer";
    const std::string out = temp_dir();
    const std::vector<std::string> base = {"--cell", "lstm", "--convention", "torch", "--weights", dir + "/weights",
                                           "--input", dir + "/input.npy", "--out", out};
    auto with = [&](std::vector<std::string> extra) {
        std::vector<std::string> a = base;
        a.insert(a.end(), extra.begin(), extra.end());
        return a;
    };
    BOOST_TEST(run_tool(with({"--layers", "3"})) == 1);      // conflicts with the weights
    BOOST_TEST(run_tool(with({"--bidirectional"})) == 1);    // weights hold one direction
    BOOST_TEST(run_tool(with({"--proj", "2"})) == 1);        // no weight_hr
    BOOST_TEST(run_tool(with({"--frobnicate"})) == 2);       // unknown flag
    BOOST_TEST(run_tool(with({"--threads", "x"})) == 2);     // not a number
    BOOST_TEST(run_tool(with({"--direction", "reverse"})) == 1);  // torch has no reverse-only layer
    BOOST_TEST(run_tool(with({"--gates", "relu"})) == 2);            // not a gate activation
    BOOST_TEST(run_tool(with({"--hard-sigmoid-alpha", "0.3"})) == 2);  // needs --gates hard_sigmoid
    BOOST_TEST(run_tool(with({"--gates", "hard_sigmoid", "--hard-sigmoid-alpha", "-1"})) == 1);  // Config names it
    BOOST_TEST(run_tool(with({"--gates", "hard_sigmoid"})) == 0);
    BOOST_TEST(run_tool(with({"--cell-activation", "sigmoid"})) == 2);  // not a candidate activation
    BOOST_TEST(run_tool(with({"--cell-activation", "relu"})) == 0);
    {  // --prefix: one module of a whole model's state_dict
        std::vector<std::string> module = {"--cell", "lstm", "--convention", "torch", "--weights",
                                           std::string(DEEPRNN_TEST_DATA) + "/weightfiles/torch_module.safetensors",
                                           "--input", std::string(DEEPRNN_TEST_DATA) + "/torch_lstm/input.npy", "--out", out};
        BOOST_TEST(run_tool(module) == 1);  // the error names the prefix
        module.insert(module.end(), {"--prefix", "encoder.lstm."});
        BOOST_TEST(run_tool(module) == 0);
    }
    {  // a torch.save checkpoint, its module by prefix
        const std::vector<std::string> checkpoint = {"--cell", "lstm", "--convention", "torch", "--weights",
                                                     std::string(DEEPRNN_TEST_DATA) + "/weightfiles/checkpoint.pt", "--prefix",
                                                     "model.encoder.lstm.", "--input",
                                                     std::string(DEEPRNN_TEST_DATA) + "/torch_lstm/input.npy", "--out", out};
        BOOST_TEST(run_tool(checkpoint) == 0);
    }
    BOOST_TEST(run_tool({"--cell", "lstm"}) == 2);           // missing required flags
    BOOST_TEST(run_tool(with({"--repeat", "3"})) == 0);
    // --onnx: the file carries the cell and weights, so those flags conflict with it.
    const std::string onnx = std::string(DEEPRNN_TEST_DATA) + "/onnx_gru/model.onnx";
    BOOST_TEST(run_tool(with({"--onnx", onnx})) == 2);
    BOOST_TEST(run_tool(with({"--onnx-index", "0"})) == 2);  // needs --onnx
    BOOST_TEST(run_tool({"--onnx", onnx, "--onnx-index", "1", "--input", dir + "/input.npy", "--out", out}) == 1);  // one operator
    for (const auto& f : files_in(out)) std::remove((out + "/" + f).c_str());
    rmdir(out.c_str());
}

BOOST_AUTO_TEST_SUITE_END()
