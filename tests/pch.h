// The headers nearly every test source includes, precompiled once for all the test
// programs (tests/CMakeLists.txt, target_precompile_headers): doctest, the standard library and
// the trainrt headers of test_util.h. Parsing them was 3-4 s of each test source's
// 7-16 s. A source still includes what it uses; the clang-tidy lint compiles the
// library sources without this file, so a missing include there still fails.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "graph/error.h"
#include "graph/infer.h"
#include "graph/onnx_io.h"
#include "ops/core/register_all.h"
#include "passes/passes.h"
#include "runtime/executor.h"
#include "runtime/training_session.h"
