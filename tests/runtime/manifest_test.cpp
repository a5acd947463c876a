//===- manifest_test.cpp - the manifest's schema --------------------------===//

#include "linac/cuda/geometry.h"
#include "linac/manifest.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>

namespace {

namespace schema = linac::manifest;

/// A GPU manifest with every optional field of the plan filled.
schema::Manifest gpuManifest() {
  schema::Manifest manifest;
  manifest.compilerVersion = "test";
  manifest.target = schema::Target::Sm90a;
  manifest.abiVersion = 3;
  manifest.layer = "layer";
  manifest.keyDim = 64;
  manifest.valueDim = 32;
  manifest.normalForm.keyDecay = schema::KeyDecay::Vector;
  manifest.normalForm.erase = schema::Strength::Scalar;
  manifest.normalForm.write = schema::Write::Vector;
  schema::Plan &plan = manifest.plan;
  plan.target = manifest.target;
  plan.family = schema::Family::DeltaChunkwise;
  plan.chunkSize = 64;
  plan.gateNumerics = schema::GateNumerics::Subchunk;
  plan.subchunkSize = 16;
  plan.sharedInputs = std::vector<int64_t>{0, 2};
  plan.lateSharedInputs = std::vector<int64_t>{};
  plan.tensorInputs = std::vector<int64_t>{0};
  plan.tensorOutput = true;
  plan.blockThreads = 512;
  plan.sharedMemory = 100000;
  plan.scanBlockThreads = 32;
  plan.chunkwiseFloat16 = false;
  plan.decodePlacement = schema::DecodePlacement::FirstUse;
  plan.decodeStaging = schema::DecodeStaging::Bulk;
  plan.decodeKeyRows = schema::DecodeKeyRows::Split;
  plan.decodeWarps = 16;
  plan.decodeParts = 1;
  plan.decodeBlockThreads = 512;
  plan.decodeStages = 3;
  plan.decodeSharedMemory = 26112;
  manifest.arguments = {{"q", schema::Role::Input, schema::Kind::Key},
                        {"w", schema::Role::Param, schema::Kind::Matrix}};
  manifest.kernels = schema::forwardKernels(plan, "layer.cubin");
  manifest.backwardKernels = schema::backwardKernels(plan);
  manifest.decode.kernels = schema::decodeKernels(plan, "layer.cubin");
  manifest.decode.parts = plan.decodeParts;
  manifest.decode.staging = plan.decodeStaging;
  manifest.step = R"({"ops":[]})";
  manifest.integrity = schema::Integrity{"abc", {{"layer.cubin", {7, "ff"}}}};
  return manifest;
}

/// Expects reading `object` to throw a SchemaError whose message holds
/// `message`.
void expectRefused(const nlohmann::json &object, const std::string &message) {
  try {
    schema::read(object.dump());
    ADD_FAILURE() << "accepted: " << message;
  } catch (const schema::SchemaError &e) {
    EXPECT_NE(std::string(e.what()).find(message), std::string::npos)
        << e.what();
  }
}

TEST(Manifest, WritesWhatItReads) {
  std::string text = schema::write(gpuManifest());
  schema::Manifest read = schema::read(text);
  EXPECT_EQ(schema::write(read), text);
  EXPECT_EQ(read.plan.decodeKeyRows, schema::DecodeKeyRows::Split);
  EXPECT_EQ(read.plan.sharedInputs, (std::vector<int64_t>{0, 2}));
  EXPECT_EQ(read.plan.tensorInputs, (std::vector<int64_t>{0}));
  EXPECT_EQ(read.plan.tensorOutput, true);
  EXPECT_EQ(read.integrity->files.at("layer.cubin").bytes, 7);
}

// A GPU package's kernels lie in their group's part's file, and the
// package lists each file once.
TEST(Manifest, GpuKernelsLieInTheirPartsFiles) {
  schema::Manifest manifest = gpuManifest();
  const std::string chunkFile = schema::cudaKernelFile(
      schema::cudaKernelPart(schema::KernelGroup::Chunk));
  const std::string decodeFile = schema::cudaKernelFile(
      schema::cudaKernelPart(schema::KernelGroup::Decode));
  EXPECT_NE(chunkFile, decodeFile);
  for (const schema::Kernel &kernel : manifest.kernels)
    EXPECT_EQ(kernel.file, kernel.family == schema::Family::Recurrent
                               ? schema::cudaKernelFile(schema::cudaKernelPart(
                                     schema::KernelGroup::Scan))
                               : chunkFile)
        << kernel.entry;
  for (const schema::Kernel &kernel : manifest.decode.kernels)
    EXPECT_EQ(kernel.file, decodeFile) << kernel.entry;
  std::vector<std::string> files = schema::kernelFiles(manifest);
  std::vector<std::string> sorted = files;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(std::unique(sorted.begin(), sorted.end()), sorted.end());
  for (const std::string &file : {chunkFile, decodeFile})
    EXPECT_NE(std::find(files.begin(), files.end(), file), files.end()) << file;
}

TEST(Manifest, EmptyOptionalFieldsAreLeftOut) {
  schema::Manifest manifest = gpuManifest();
  manifest.plan.subchunkSize.reset();
  nlohmann::json object = nlohmann::json::parse(schema::write(manifest));
  EXPECT_FALSE(object["plan"].contains("subchunk_size"));
  EXPECT_FALSE(schema::read(object.dump()).plan.subchunkSize);
}

TEST(Manifest, KernelListFollowsThePlan) {
  schema::Plan plan = gpuManifest().plan;
  // fp16 takes the scan when the plan says so; fp32 always does.
  std::vector<std::string> entries;
  for (const schema::Kernel &kernel : schema::forwardKernels(plan, "k"))
    entries.push_back(kernel.entry);
  EXPECT_EQ(entries, (std::vector<std::string>{
                         "linac_chunk_bfloat16", "linac_scan_float32",
                         "linac_scan_float16"}));
  plan.family = schema::Family::Recurrent;
  EXPECT_FALSE(schema::chunkwiseFor(plan, linac::DType::BFloat16));
  plan.target = schema::Target::Cpu;
  EXPECT_EQ(schema::forwardKernels(plan, "layer.so").front().entry,
            "linac_cpu_forward");
  // A cpu package's backward is its kernel file's linac_cpu_backward; a
  // GPU package's kernels each take every dtype: token by token one,
  EXPECT_TRUE(schema::backwardKernels(plan).empty());
  plan.target = schema::Target::Sm80;
  plan.backwardFamily = schema::Family::Recurrent;
  const std::vector<schema::Kernel> backward = schema::backwardKernels(plan);
  ASSERT_EQ(backward.size(), 1u);
  EXPECT_EQ(backward.front().entry, "linac_scan_backward");
  EXPECT_EQ(backward.front().blockThreads, plan.scanBlockThreads);
  // chunkwise seven in launch order, those whose blocks take a chunk's
  // columns with the plan's shared memory, the two walks' with more
  // threads.
  plan.backwardFamily = schema::Family::DeltaChunkwise;
  plan.backwardSharedMemory = 109952;
  std::vector<std::string> chunkwise;
  for (const schema::Kernel &kernel : schema::backwardKernels(plan)) {
    chunkwise.push_back(kernel.entry);
    EXPECT_EQ(kernel.family, schema::Family::DeltaChunkwise);
    const bool perToken = kernel.entry == "linac_backward_operands" ||
                          kernel.entry == "linac_backward_reads" ||
                          kernel.entry == "linac_backward_arguments";
    EXPECT_EQ(kernel.sharedMemory, perToken ? 0 : 109952);
    const bool walk = kernel.entry == "linac_backward_states" ||
                      kernel.entry == "linac_backward_state_gradients";
    EXPECT_EQ(kernel.blockThreads, walk ? linac::cuda::kBackwardWalkThreads
                                        : linac::cuda::kBackwardThreads);
  }
  EXPECT_EQ(chunkwise,
            (std::vector<std::string>{
                "linac_backward_operands", "linac_backward_prepare",
                "linac_backward_states", "linac_backward_reads",
                "linac_backward_state_gradients", "linac_backward_chunks",
                "linac_backward_arguments"}));
}

TEST(Manifest, ErrorsNameTheField) {
  struct Case {
    std::function<void(nlohmann::json &)> edit;
    std::string message;
  };
  std::vector<Case> cases = {
      {[](auto &m) { m["plan"]["decode_key_rows"] = "half"; },
       "plan.decode_key_rows is \"half\"; expected whole or split"},
      {[](auto &m) { m["plan"]["shared_inputs"] = 3; },
       "plan.shared_inputs is 3; expected an array"},
      {[](auto &m) { m["plan"]["shared_inputs"][1] = "x"; },
       "plan.shared_inputs[1] is \"x\"; expected an integer"},
      {[](auto &m) { m["plan"]["tensor_inputs"][0] = 1; },
       "plan.tensor_inputs names input 1 of 1"},
      {[](auto &m) { m["plan"]["tensor_inputs"][0] = -1; },
       "plan.tensor_inputs[0] is -1; expected an integer from 0"},
      {[](auto &m) { m["normal_form"]["normalizer"] = 0; },
       "normal_form.normalizer is 0; expected true or false"},
      {[](auto &m) { m["integrity"]["files"]["layer.cubin"]["sha256"] = 5; },
       "integrity.files.layer.cubin.sha256 is 5; expected a string"},
      {[](auto &m) { m["decode"]["kernels"][0].erase("entry"); },
       "decode.kernels[0].entry is missing"},
      {[](auto &m) { m["layer"] = nullptr; },
       "layer is null; expected a string"},
      {[](auto &m) { m = nlohmann::json::array(); },
       "the manifest is not a JSON object"},
  };
  for (const Case &c : cases) {
    nlohmann::json manifest = nlohmann::json::parse(schema::write(gpuManifest()));
    c.edit(manifest);
    expectRefused(manifest, c.message);
  }
  EXPECT_THROW(schema::read("{\"format\": 3"), schema::SchemaError);
}

TEST(Manifest, RowInputsAreTensorInputsOfWholeSwizzledBoxes) {
  schema::Manifest manifest = gpuManifest();
  manifest.valueDim = 128;
  manifest.arguments = {{"q", schema::Role::Input, schema::Kind::Key},
                        {"v", schema::Role::Input, schema::Kind::Value},
                        {"dt", schema::Role::Input, schema::Kind::Scalar}};
  manifest.plan.tensorInputs = std::vector<int64_t>{0, 1};
  // The query and the key both rows of input 0.
  manifest.plan.rowInputs = std::vector<int64_t>{0, 0, 1};
  schema::Manifest read = schema::read(schema::write(manifest));
  EXPECT_EQ(read.plan.rowInputs, (std::vector<int64_t>{0, 0, 1}));

  auto refused = [&](auto edit, const std::string &message) {
    nlohmann::json object = nlohmann::json::parse(schema::write(manifest));
    edit(object);
    expectRefused(object, message);
  };
  refused(
      [](auto &m) {
        m["plan"]["row_inputs"] = {0, 1};
      },
      "plan.row_inputs are three of the plan's tensor_inputs");
  refused([](auto &m) { m["plan"].erase("tensor_inputs"); },
          "plan.row_inputs are three of the plan's tensor_inputs");
  refused([](auto &m) { m["plan"]["row_inputs"][2] = 2; },
          "plan.row_inputs names input 2, which is not a tensor input");
  refused(
      [](auto &m) {
        m["plan"]["row_inputs"] = {0, 0, 0};
      },
      "tensor input 'v' of a package with plan.row_inputs is not a row "
      "of whole swizzled boxes");
  refused([](auto &m) { m["value_dim"] = 96; },
          "tensor input 'v' of a package with plan.row_inputs is not a row "
          "of whole swizzled boxes");
}

TEST(Manifest, CpuKernelFilesByInstructionSet) {
  schema::Manifest manifest = gpuManifest();
  manifest.target = manifest.plan.target = schema::Target::Cpu;
  manifest.abiVersion = 2;
  manifest.plan.tensorInputs.reset();
  manifest.plan.tensorOutput.reset();
  manifest.kernels = schema::forwardKernels(manifest.plan, "layer.so");
  manifest.backwardKernels = schema::backwardKernels(manifest.plan);
  manifest.decode.kernels = schema::decodeKernels(manifest.plan, "layer.so");
  schema::addIsaVariant(manifest, schema::CpuIsa::Avx2Fma, "layer.avx2_fma.so");
  ASSERT_EQ(manifest.kernels.size(), 2u);
  EXPECT_EQ(manifest.kernels[0].isa, schema::CpuIsa::Baseline);
  EXPECT_EQ(manifest.decode.kernels[1].file, "layer.avx2_fma.so");
  schema::Manifest read = schema::read(schema::write(manifest));
  EXPECT_EQ(read.kernels[1].isa, schema::CpuIsa::Avx2Fma);

  // Each instruction set's entries share its forward kernel's file.
  nlohmann::json object = nlohmann::json::parse(schema::write(manifest));
  object["decode"]["kernels"][1]["file"] = "layer.so";
  expectRefused(object, "decode.kernels[1].file 'layer.so' is not the "
                        "package's kernel file 'layer.avx2_fma.so'");
  // Tensor maps are a GPU kernel's.
  object = nlohmann::json::parse(schema::write(manifest));
  object["plan"]["tensor_inputs"] = {0};
  expectRefused(object, "plan.tensor_inputs are a GPU package's");
  object["plan"].erase("tensor_inputs");
  object["plan"]["tensor_output"] = true;
  expectRefused(object, "plan.tensor_output is a GPU package's");
  // A GPU kernel names no instruction set.
  object = nlohmann::json::parse(schema::write(gpuManifest()));
  object["kernels"][0]["isa"] = "avx2_fma";
  expectRefused(object, "kernels[0].isa is avx2_fma; only CPU kernels name one");
}

TEST(Manifest, PhasedKernelsFollowThePlan) {
  schema::Manifest manifest = gpuManifest();
  schema::Plan &plan = manifest.plan;
  EXPECT_FALSE(schema::phasedFor(plan));
  plan.phased = schema::PhasedUse::ByShape;
  plan.phasedBlockThreads = plan.prepareBlockThreads = 256;
  plan.phasedSharedMemory = 90000;
  plan.prepareSharedMemory = 60000;
  plan.preparedChunkBytes = 4096;
  manifest.phased = schema::phasedFor(plan);
  // A preparing and a state kernel per chunkwise dtype: the plan's fp16
  // takes the scan.
  ASSERT_TRUE(manifest.phased);
  ASSERT_EQ(manifest.phased->prepare.size(), 1u);
  ASSERT_EQ(manifest.phased->state.size(), 1u);
  EXPECT_EQ(manifest.phased->prepare[0].entry, "linac_prepare_bfloat16");
  EXPECT_EQ(manifest.phased->prepare[0].sharedMemory, 60000);
  EXPECT_EQ(manifest.phased->state[0].entry, "linac_phased_bfloat16");
  EXPECT_EQ(manifest.phased->state[0].sharedMemory, 90000);
  EXPECT_EQ(manifest.phased->chunkBytes, 4096);
  EXPECT_EQ(manifest.phased->use, schema::PhasedUse::ByShape);
  schema::Manifest read = schema::read(schema::write(manifest));
  EXPECT_EQ(read.phased->state[0].blockThreads, 256);
  // Each use reads back as written.
  for (schema::PhasedUse use :
       {schema::PhasedUse::Segmented, schema::PhasedUse::Always}) {
    schema::Manifest withUse = manifest;
    withUse.plan.phased = use;
    withUse.phased = schema::phasedFor(withUse.plan);
    schema::Manifest back = schema::read(schema::write(withUse));
    EXPECT_EQ(back.plan.phased, use);
    EXPECT_EQ(back.phased->use, use);
  }

  struct Case {
    std::function<void(nlohmann::json &)> edit;
    std::string message;
  };
  std::vector<Case> cases = {
      {[](auto &m) { m.erase("phased"); }, "phased is missing for plan.phased"},
      {[](auto &m) { m["plan"].erase("phased"); },
       "phased is only a plan.phased plan's"},
      {[](auto &m) { m["phased"]["state"] = nlohmann::json::array(); },
       "phased.state is empty or not one kernel for each of "
       "phased.prepare's"},
      {[](auto &m) { m["phased"]["state"][0]["dtype"] = "float16"; },
       "phased.prepare[0] and phased.state[0] differ in dtype"},
      {[](auto &m) { m["phased"]["chunk_bytes"] = 4100; },
       "phased.chunk_bytes 4100 is not a multiple of 16"},
      {[](auto &m) { m["phased"]["use"] = "never"; },
       "phased.use is \"never\"; expected by_shape, segmented or always"},
      {[](auto &m) { m["phased"]["prepare"][0].erase("shared_memory"); },
       "phased.prepare[0] 'linac_prepare_bfloat16' has no block_threads or "
       "shared_memory"},
  };
  for (const Case &c : cases) {
    nlohmann::json object = nlohmann::json::parse(schema::write(manifest));
    c.edit(object);
    expectRefused(object, c.message);
  }
}

TEST(Manifest, ShapesAndTrailingDimensions) {
  EXPECT_EQ(schema::shapeText(schema::Role::Input, schema::Kind::Matrix),
            "[B, T, H, K, V]");
  EXPECT_EQ(schema::shapeText(schema::Role::Param, schema::Kind::Scalar), "[H]");
  EXPECT_EQ(schema::trailingDims(schema::Kind::Value, 64, 32),
            (std::vector<int64_t>{32}));
  EXPECT_EQ(schema::runtimeArguments(true)[2].shape, "[N, H, K, V + 1]");
}

} // namespace
