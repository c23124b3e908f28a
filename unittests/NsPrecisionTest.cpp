//===- NsPrecisionTest.cpp - ns_dtype "auto" on the CPU, per ISA ----------===//
//
// What ns_dtype "auto" is on the CPU (NsPrecision.h): f32 on every ISA
// without bf16 products whatever the rates, and where there are bf16
// products (AVX512_BF16, AMX) the precision whose products the rates make
// faster by the rule's margin. The rule is checked on given facts for each
// ISA oneDNN reports, with the rates of the CPUs the rule was measured on
// (a Zen 4 EPYC, an Emerald Rapids without AMX); the rates' variable, the
// measurement (that it yields rates, never how fast) and this process's
// device against the rule hold on any CPU.
//
//===----------------------------------------------------------------------===//
#include "muon/Runtime/Cpu/CpuDevice.h"
#include "muon/Runtime/Cpu/NsPrecision.h"

#include <gtest/gtest.h>

using namespace muon;
using namespace muon::runtime;
using namespace muon::runtime::cpu;

namespace {

NsPrecisionFacts factsOf(const std::string &isa, bool bf16Products,
                         double f32Rate = 0, double bf16Rate = 0) {
  NsPrecisionFacts facts;
  facts.isa = isa;
  facts.bf16Products = bf16Products;
  facts.blas = "OpenBLAS, SkylakeX kernels";
  facts.rates.f32 = f32Rate;
  facts.rates.bf16 = bf16Rate;
  facts.ratesSource = "measured on one thread";
  return facts;
}

struct IsaCase {
  const char *what;
  NsPrecisionFacts facts;
  DType want;
};

} // namespace

TEST(NsPrecision, ChoicePerIsa) {
  const std::vector<IsaCase> cases = {
      // No bf16 products: the ISA decides, and fast bf16 rates given for
      // them change nothing (bf16 would run f32 products there).
      {"no oneDNN", factsOf("built without oneDNN (MUON_ONEDNN=OFF)", false),
       DType::F32},
      {"AVX2", factsOf("oneDNN 2.6.3 on avx2", false, 1e11, 5e11),
       DType::F32},
      {"AVX-512", factsOf("oneDNN 2.6.3 on avx512_core", false, 1e11, 5e11),
       DType::F32},
      {"AVX-512 VNNI",
       factsOf("oneDNN 2.6.3 on avx512_core_vnni", false, 1e11, 5e11),
       DType::F32},
      // AVX512_BF16: the rates decide. A Zen 4 EPYC (this development
      // machine: 224 against 105 GFLOP/s), an Emerald Rapids without AMX
      // (the issue's: 54 against 115).
      {"AVX512_BF16, Zen 4",
       factsOf("oneDNN 2.6.3 on avx512_core_bf16", true, 1.047e11, 2.241e11),
       DType::BF16},
      {"AVX512_BF16, Emerald Rapids without AMX",
       factsOf("oneDNN 2.6.3 on avx512_core_bf16", true, 1.15e11, 5.44e10),
       DType::F32},
      // AMX: the rates decide too, and tile products are many times
      // sgemm's; were they not, f32 would be chosen.
      {"AMX", factsOf("oneDNN 2.6.3 on avx512_core_amx", true, 1e11, 9e11),
       DType::BF16},
      {"AMX, slow tiles",
       factsOf("oneDNN 2.6.3 on avx512_core_amx", true, 1e11, 9e10),
       DType::F32},
      // The margin: at it bf16, just under it f32.
      {"at the margin",
       factsOf("oneDNN 2.6.3 on avx512_core_bf16", true, 1e11,
               kBf16MinSpeedup * 1e11),
       DType::BF16},
      {"under the margin",
       factsOf("oneDNN 2.6.3 on avx512_core_bf16", true, 1e11, 1.29e11),
       DType::F32},
      // bf16 products whose rate could not be measured: f32.
      {"no rates", factsOf("oneDNN 2.6.3 on avx512_core_bf16", true),
       DType::F32},
  };
  for (const IsaCase &c : cases) {
    const NsPrecisionChoice choice = chooseDefaultNsPrecision(c.facts);
    EXPECT_EQ(choice.dtype, c.want) << c.what << ": " << choice.reason;
    // The reason starts with what was chosen.
    EXPECT_EQ(choice.reason.rfind(std::string(dtypeName(c.want)) + ": ", 0),
              0u)
        << c.what << ": " << choice.reason;
  }
}

TEST(NsPrecision, ReasonsSayWhy) {
  EXPECT_EQ(chooseDefaultNsPrecision(factsOf("oneDNN 2.6.3 on avx2", false))
                .reason,
            "f32: no bf16 products here (oneDNN 2.6.3 on avx2), so bf16 "
            "would run f32 products rounded to bf16, never faster");
  EXPECT_EQ(chooseDefaultNsPrecision(
                factsOf("oneDNN 2.6.3 on avx512_core_bf16", true, 1.047e11,
                        2.241e11))
                .reason,
            "bf16: its products run at 2.14x f32's here (bf16 224.1 GFLOP/s "
            "on oneDNN 2.6.3 on avx512_core_bf16, f32 104.7 GFLOP/s on "
            "OpenBLAS, SkylakeX kernels, measured on one thread), at least "
            "the 1.30x at which bf16 Newton-Schulz is the faster");
  EXPECT_EQ(chooseDefaultNsPrecision(
                factsOf("oneDNN 2.6.3 on avx512_core_bf16", true, 1.15e11,
                        5.44e10))
                .reason,
            "f32: bf16 products run at 0.47x f32's here (bf16 54.4 GFLOP/s "
            "on oneDNN 2.6.3 on avx512_core_bf16, f32 115.0 GFLOP/s on "
            "OpenBLAS, SkylakeX kernels, measured on one thread), under the "
            "1.30x bf16 Newton-Schulz needs to be the faster");
  NsPrecisionFacts failed = factsOf("oneDNN 2.6.3 on avx512_core_amx", true);
  failed.ratesSource = "not measured: oneDNN: could not create a primitive";
  EXPECT_EQ(chooseDefaultNsPrecision(failed).reason,
            "f32: the products' rates are unknown (not measured: oneDNN: "
            "could not create a primitive)");
}

TEST(NsPrecision, RatesVariable) {
  for (const char *text :
       {"f32=1.05e11,bf16=2.24e11", "bf16=2.24e11,f32=1.05e11"}) {
    StatusOr<ProductRates> rates = parseProductRates(text);
    ASSERT_TRUE(rates.ok()) << text << ": " << rates.status().message();
    EXPECT_EQ(rates->f32, 1.05e11) << text;
    EXPECT_EQ(rates->bf16, 2.24e11) << text;
  }
  // Formatted rates read back exactly.
  ProductRates odd;
  odd.f32 = 104702011.123456789;
  odd.bf16 = 2.2410000000000001e11;
  StatusOr<ProductRates> back = parseProductRates(formatProductRates(odd));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->f32, odd.f32);
  EXPECT_EQ(back->bf16, odd.bf16);
  for (const char *text :
       {"", "f32=1e11", "bf16=1e11", "f32=1e11,bf16=", "f32=x,bf16=1e11",
        "f32=1e11,bf16=-2e11", "f32=0,bf16=1e11", "f32=1e11,bf16=inf",
        "f32=1e11,bf16=nan", "f32=1e11;bf16=2e11", "f32=1e11,bf16=2e11,f32=3",
        "f16=1e11,bf16=2e11", "f32=1e11 ,bf16=2e11", "f32 1e11,bf16 2e11"}) {
    StatusOr<ProductRates> rates = parseProductRates(text);
    ASSERT_FALSE(rates.ok()) << "'" << text << "' was accepted";
    EXPECT_EQ(rates.status().code(), StatusCode::InvalidArgument);
    EXPECT_EQ(rates.status().message(),
              std::string("MUON_CPU_PRODUCT_RATES '") + text +
                  "': expected f32=RATE,bf16=RATE (flop/s, positive, e.g. "
                  "f32=1.05e11,bf16=2.24e11)");
  }
}

/// The probe yields both rates where there are bf16 products, and says why
/// not elsewhere (DNNL_MAX_CPU_ISA=AVX512_CORE makes any CPU the latter).
TEST(NsPrecision, Measured) {
  const StatusOr<ProductRates> measured = measureProductRates();
  if (!oneDnnBuilt() || !cpuHasBf16Products()) {
    EXPECT_FALSE(measured.ok());
    GTEST_SKIP() << "UNSUPPORTED: no bf16 products here ("
                 << measured.status().message() << ")";
  }
  ASSERT_TRUE(measured.ok()) << measured.status().message();
  const ProductRates &rates = *measured;
  EXPECT_GT(rates.f32, 0);
  EXPECT_GT(rates.bf16, 0);
}

/// The device's "auto" is the process's choice, and f32 where the device
/// may not use oneDNN.
TEST(NsPrecision, ThisProcess) {
  const NsPrecisionFacts &facts = processNsPrecisionFacts();
  EXPECT_EQ(facts.bf16Products, oneDnnBuilt() && cpuHasBf16Products());
  const NsPrecisionChoice &choice = processDefaultNsPrecision();
  EXPECT_EQ(choice.dtype, chooseDefaultNsPrecision(facts).dtype);
  CpuDevice device;
  EXPECT_EQ(device.defaultNsDtype(), choice.dtype);
  EXPECT_EQ(device.defaultNsDtypeReason(), choice.reason);
  if (facts.bf16Products)
    EXPECT_NE(choice.reason.find(facts.ratesSource), std::string::npos)
        << choice.reason;
  CpuDeviceOptions blasOnly;
  blasOnly.oneDnn = false;
  CpuDevice noOneDnn(blasOnly);
  EXPECT_EQ(noOneDnn.defaultNsDtype(), DType::F32);
  EXPECT_EQ(noOneDnn.defaultNsDtypeReason(),
            "f32: no bf16 products here (this device's oneDnn option is "
            "off), so bf16 would run f32 products rounded to bf16, never "
            "faster");
}
