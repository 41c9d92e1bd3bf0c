// Symbols: automatic naming, listing, shape inference and its errors, the
// text format's round trip, composition errors.
#include "engine/symbol.h"
#include "engine/models.h"

#include <cstdio>
#include <fstream>

#include <gtest/gtest.h>

namespace kvtrain {
namespace {

using Names = std::vector<std::string>;

TEST(SymbolTest, ListsArgumentsOutputsAndAuxiliaryStates) {
  Symbol mlp = models::Mlp({128, 64});
  ASSERT_TRUE(mlp.ok()) << mlp.status();
  EXPECT_EQ(mlp.ListArguments(),
            (Names{"data", "fc1_weight", "fc1_bias", "fc2_weight", "fc2_bias",
                   "fc3_weight", "fc3_bias", "softmax_label"}));
  EXPECT_EQ(mlp.ListOutputs(), Names{"softmax_output"});
  EXPECT_TRUE(mlp.ListAuxiliaryStates().empty());
  Symbol bn = Symbol::Op("BatchNorm", "bn", {Symbol::Variable("x")});
  EXPECT_EQ(bn.ListArguments(), (Names{"x", "bn_gamma", "bn_beta"}));
  EXPECT_EQ(bn.ListAuxiliaryStates(),
            (Names{"bn_moving_mean", "bn_moving_var"}));
  // Dropout's mask is hidden: one output.
  EXPECT_EQ(Symbol::Op("Dropout", "drop", {bn}).ListOutputs(),
            Names{"drop_output"});
}

TEST(SymbolTest, InferShapeFromTheDataShape) {
  Symbol lenet = models::LeNet();
  auto shapes = lenet.InferShape({{"data", {100, 1, 28, 28}}});
  ASSERT_TRUE(shapes.ok()) << shapes.status();
  const Names args = lenet.ListArguments();
  std::map<std::string, Shape> by_name;
  for (size_t i = 0; i < args.size(); ++i) by_name[args[i]] = shapes->arguments[i];
  EXPECT_EQ(by_name["conv1_weight"], Shape({20, 1, 5, 5}));
  EXPECT_EQ(by_name["conv2_weight"], Shape({50, 20, 5, 5}));
  EXPECT_EQ(by_name["fc1_weight"], Shape({500, 800}));
  EXPECT_EQ(by_name["fc2_bias"], Shape({10}));
  EXPECT_EQ(by_name["softmax_label"], Shape({100}));
  EXPECT_EQ(shapes->outputs, std::vector<Shape>{Shape({100, 10})});
}

TEST(SymbolTest, InferShapeErrorsNameTheOpAndShapes) {
  Symbol mlp = models::Mlp({128, 64});
  EXPECT_EQ(mlp.InferShape({{"data", {32, 784}}, {"fc2_weight", {10, 64}}})
                .status()
                .message(),
            "fc2 (FullyConnected): fc2_weight is (10, 64), expected (64, 128)");
  Symbol x = Symbol::Variable("x");
  Symbol fc2 = sym::FullyConnected(sym::FullyConnected(x, "fc1", 128), "fc2", 10);
  EXPECT_EQ(fc2.InferShape({{"x", {32, 784}}, {"fc2_weight", {10, 64}}})
                .status()
                .message(),
            "fc2 (FullyConnected): input has 128 features but fc2_weight is "
            "(10, 64)");
  EXPECT_EQ(mlp.InferShape({{"dat", {32, 784}}}).status().message(),
            "InferShape: \"dat\" is not an argument of the graph; arguments: "
            "data, fc1_weight, fc1_bias, fc2_weight, fc2_bias, fc3_weight, "
            "fc3_bias, softmax_label");
  EXPECT_EQ(mlp.InferShape({}).status().message(),
            "fc1 (FullyConnected): the shape of data is unknown");
}

TEST(SymbolTest, CompositionErrorsSurfaceLater) {
  Symbol bad = Symbol::Op("Convolution", "conv", {Symbol::Variable("x")},
                          {{"kernel", "(3,3)"}});
  EXPECT_FALSE(bad.ok());
  Symbol next = sym::Flatten(bad, "flat");
  EXPECT_EQ(next.status().message(), "conv (Convolution): missing attribute num_filter");
  EXPECT_EQ(next.InferShape({}).status(), bad.status());
  EXPECT_EQ(Symbol::Op("Softmax", "s", {}).status().code(), Status::Code::kNotFound);
  Symbol x = Symbol::Variable("x");
  EXPECT_EQ(Symbol::Op("Flatten", "f", {x, x}).status().message(),
            "f (Flatten) takes 1 inputs (data), got 2");
  Symbol two = Symbol::Group({x, Symbol::Variable("y")});
  EXPECT_EQ(Symbol::Op("Flatten", "f", {two}).status().message(),
            "input 0 of f (Flatten) has 2 outputs; an op input needs exactly "
            "one (pick one with [i])");
  EXPECT_EQ(two[1].ListOutputs(), Names{"y"});
  Symbol dup = Symbol::Group({sym::Flatten(x, "f"), sym::Flatten(x, "f")});
  EXPECT_EQ(dup.InferShape({{"x", {2, 3}}}).status().message(),
            "the graph has two different nodes named \"f\"; node names must be "
            "unique");
}

TEST(SymbolTest, TextRoundTrip) {
  Symbol a = Symbol::Op("Concat", "cat",
                        {models::LeNet(), Symbol::Variable("extra", "dev2")},
                        {{"num_args", "2"}}, "dev1");
  auto text = a.ToText();
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_NE(text->find("op: \"Convolution\""), std::string::npos);
  EXPECT_NE(text->find("ctx_group: \"dev1\""), std::string::npos);
  auto b = Symbol::FromText(*text);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(*b->ToText(), *text);
  EXPECT_EQ(b->ListArguments(), a.ListArguments());
  EXPECT_EQ(b->ListOutputs(), a.ListOutputs());
  // Through a file as well.
  const std::string path = ::testing::TempDir() + "/lenet.graph";
  ASSERT_TRUE(models::LeNet().Save(path).ok());
  auto loaded = Symbol::Load(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(*loaded->ToText(), *models::LeNet().ToText());
  auto shapes = loaded->InferShape({{"data", {4, 1, 28, 28}}});
  ASSERT_TRUE(shapes.ok()) << shapes.status();
  std::remove(path.c_str());
}

TEST(SymbolTest, BadTextIsRejectedWithReasons) {
  EXPECT_EQ(Symbol::FromText("nodes { name: ").status().message(),
            "graph text: not a valid kvtrain.proto.GraphDef in text format");
  EXPECT_EQ(Symbol::FromText("nodes { name: \"f\" op: \"Flatten\" inputs { "
                             "node: \"x\" } } outputs { node: \"f\" }")
                .status()
                .message(),
            "graph text: node \"f\" reads unknown (or later) node \"x\"");
  auto unknown = Symbol::FromText(
      "nodes { name: \"x\" } nodes { name: \"g\" op: \"Gelu\" inputs { node: "
      "\"x\" } } outputs { node: \"g\" }");
  EXPECT_EQ(unknown.status().code(), Status::Code::kNotFound);
  EXPECT_NE(unknown.status().message().find("known operators: Activation"),
            std::string::npos);
  EXPECT_EQ(Symbol::Load("/nonexistent/graph").status().code(),
            Status::Code::kNotFound);
}

TEST(SymbolTest, VariablesCarryTheirRateMultipliersThroughText) {
  Symbol w = Symbol::Variable("fc_weight", "", {{"__lr_mult__", "0"}, {"__wd_mult__", "2.5"}});
  ASSERT_TRUE(w.ok()) << w.status();
  Symbol fc = Symbol::Op("FullyConnected", "fc", {Symbol::Variable("data"), w},
                         {{"num_hidden", "2"}});
  auto text = fc.ToText();
  ASSERT_TRUE(text.ok()) << text.status();
  auto back = Symbol::FromText(*text);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back->ToText(), *text);
  EXPECT_NE(text->find("__wd_mult__"), std::string::npos) << *text;
  EXPECT_EQ(Symbol::Variable("v", "", {{"shape", "(2, 3)"}}).status().message(),
            "variable \"v\": attribute \"shape\" is not one a variable takes (__lr_mult__, "
            "__wd_mult__)");
  EXPECT_EQ(Symbol::Variable("v", "", {{"__lr_mult__", "-1"}}).status().message(),
            "variable \"v\": __lr_mult__ \"-1\" is not a number >= 0");
}

}  // namespace
}  // namespace kvtrain
