//===- PipelineOptions.h - textual options over a plain struct -*- C++ -*-===//
//
// A pipeline's options are one plain struct (copyable, defaults in-class, as
// MLIR's tablegen'd per-pass option structs are), which C++ callers fill and
// pass to build<Stage>Pipeline. Its textual registration
// (`llc-dist-opt --llcdist-train='dp=2 ...'`) names each field once, in a bind
// function, and takes the field's default from the struct:
//
//   void bindForward(TextualPipelineOptions<ForwardOptions> &o,
//                    ForwardOptions &fields) {
//     o.bind("dp", fields.dp, "data-parallel degree");
//   }
//   registerTextualPipeline<ForwardOptions>("my-pipeline", "...", bindForward,
//                                           buildForwardPipeline);
//
// So no option is written twice: not as a PassPipelineOptions copy of the
// struct, nor in field-by-field copies between the two (upstream's
// PassPipelineOptions keeps the values in cl::opt objects, which touch LLVM's
// global option parser when built or copied; the plain struct can be copied
// freely, and from several threads, as llc-dist's memory hints do).
//
// Header-only: it needs MLIR's pass headers, not the MLIR-free Support library.
//
//===----------------------------------------------------------------------===//
#ifndef LLCDIST_SUPPORT_PIPELINEOPTIONS_H
#define LLCDIST_SUPPORT_PIPELINEOPTIONS_H

#include "mlir/Pass/PassOptions.h"
#include "mlir/Pass/PassRegistry.h"

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace llcdist {

/// The textual options of a pipeline whose options are the plain struct `T`:
/// one PassOptions option per bound field, initialized to the field's value
/// in a default-constructed `T`.
template <typename T>
class TextualPipelineOptions final
    : public mlir::PassPipelineOptions<TextualPipelineOptions<T>> {
public:
  /// Declares the options over the fields of `fields` (see the file comment).
  using BindFn = void (*)(TextualPipelineOptions &options, T &fields);

  explicit TextualPipelineOptions(BindFn bindFields) { bindFields(*this, fields); }

  /// Declares option `arg` for `field`, a member of the struct handed to the
  /// bind function; its default is the field's current (in-class) value.
  template <typename V>
  void bind(llvm::StringRef arg, V &field, llvm::StringRef description) {
    using Opt = typename mlir::PassPipelineOptions<
        TextualPipelineOptions<T>>::template Option<V>;
    auto option = std::make_unique<Opt>(*this, arg, llvm::cl::desc(description),
                                        llvm::cl::init(field));
    const Opt *read = option.get();
    stores.push_back([read, &field] { field = read->getValue(); });
    options.push_back(std::move(option));
  }

  /// The struct with every option's parsed (or default) value.
  T parsed() {
    for (const std::function<void()> &store : stores)
      store();
    return fields;
  }

private:
  T fields;
  /// The options (PassOptions keeps pointers to them) and, for each, how its
  /// value gets into `fields`.
  std::vector<std::unique_ptr<llvm::cl::Option>> options;
  std::vector<std::function<void()>> stores;
};

/// Registers the textual pipeline `arg`: its options are those `bindFields`
/// declares over `T`; `build` gets the parsed struct, after `validate` (when
/// given) found no error in it: an error fails the pipeline's construction
/// with its message.
template <typename T>
void registerTextualPipeline(
    llvm::StringRef arg, llvm::StringRef description,
    typename TextualPipelineOptions<T>::BindFn bindFields,
    std::function<void(mlir::OpPassManager &, const T &)> build,
    std::function<std::optional<std::string>(const T &)> validate = nullptr) {
  mlir::registerPassPipeline(
      arg, description,
      [arg, bindFields, build, validate](mlir::OpPassManager &pm, llvm::StringRef text,
                                         llvm::function_ref<mlir::LogicalResult(const llvm::Twine &)> fail) {
        TextualPipelineOptions<T> options(bindFields);
        if (mlir::failed(options.parseFromString(text)))
          return mlir::failure();
        T parsed = options.parsed();
        if (validate)
          if (std::optional<std::string> error = validate(parsed))
            return fail(llvm::Twine(arg) + ": " + *error);
        build(pm, parsed);
        return mlir::success();
      },
      [bindFields](llvm::function_ref<void(const mlir::detail::PassOptions &)> handler) {
        handler(TextualPipelineOptions<T>(bindFields));
      });
}

} // namespace llcdist

#endif
