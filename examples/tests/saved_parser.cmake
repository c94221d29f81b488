# The saved-parser and parse-output tests of train_treebank_parser, run by
# ctest as `cmake -DSTEP=... -DPARSER=... -DCHECK=... -DDATA=... -DSAMPLE=...
# -DWORK=... -P saved_parser.cmake` (examples/CMakeLists.txt). Tiny sizes: the
# examples' tests also run at -O0 under sanitizers.
#
#   train       train 1 epoch, --save WORK/model, and write the in-memory
#               parse of DATA/unannotated.conllu (the fixture of the others)
#   roundtrip   --model WORK/model parses the same file: byte for byte the
#               in-memory parse; the output valid (check_parsed_conllu); the
#               same folder rewritten as format version 2 (before --loss,
#               --decode, --projective) loads with their defaults and gives
#               the same parse
#   text        --model parses DATA/plain_text.txt into valid CoNLL-U
#   damaged     copies of the model with a file missing, a wrong shape, another
#               format version, a relation dropped: each load fails with exit 2
#               and an error naming the file and what is wrong; an unannotated
#               --dev and a malformed --parse file name file and line

function(run_parser expect_rc out_var)
  execute_process(COMMAND ${PARSER} ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc STREQUAL "${expect_rc}")
    message(FATAL_ERROR "train_treebank_parser ${ARGN}: exit status ${rc}, expected ${expect_rc}\n${out}\n${err}")
  endif()
  set(${out_var} "${err}" PARENT_SCOPE)
endfunction()

function(check_output out in)
  execute_process(COMMAND ${CHECK} ${out} ${in} RESULT_VARIABLE rc OUTPUT_VARIABLE msg ERROR_VARIABLE msg)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "${msg}")
  endif()
  message(STATUS "${msg}")
endfunction()

# A load of `model` that must fail naming `file` with `what` (regular expressions).
function(expect_load_error model file what)
  run_parser(2 err --model ${model} --parse ${DATA}/unannotated.conllu --out ${WORK}/never.conllu)
  if(NOT err MATCHES "${file}" OR NOT err MATCHES "${what}")
    message(FATAL_ERROR "loading ${model}: the error should name ${file} and say '${what}', it says:\n${err}")
  endif()
  if(EXISTS ${WORK}/never.conllu)
    message(FATAL_ERROR "loading ${model} failed but wrote ${WORK}/never.conllu")
  endif()
  message(STATUS "as expected: ${err}")
endfunction()

# Parses DATA/unannotated.conllu with the saved parser in `model` into
# WORK/<out>: byte for byte the in-memory parse, or a fatal error.
function(expect_in_memory_parse model out)
  file(REMOVE ${WORK}/${out})
  run_parser(0 err --model ${model} --parse ${DATA}/unannotated.conllu --out ${WORK}/${out})
  execute_process(COMMAND ${CMAKE_COMMAND} -E compare_files ${WORK}/in_memory.conllu ${WORK}/${out} RESULT_VARIABLE rc)
  if(NOT rc EQUAL 0)
    message(FATAL_ERROR "the parse of ${model}, ${WORK}/${out}, differs from the in-memory one ${WORK}/in_memory.conllu")
  endif()
endfunction()

# A copy of the saved parser to damage.
function(copy_model name)
  file(REMOVE_RECURSE ${WORK}/${name})
  file(COPY ${WORK}/model/ DESTINATION ${WORK}/${name})
endfunction()

set(tiny --epochs 1 --width 16 --layers 2 --arc-hidden 16 --label-hidden 16 --no-check)

if(STEP STREQUAL "train")
  file(REMOVE_RECURSE ${WORK})
  file(MAKE_DIRECTORY ${WORK})
  # The sample's dev file (150 sentences) to train on too: the fixture needs a trained parser, not a good one.
  run_parser(0 err --train ${SAMPLE}/en_ewt-sample-dev.conllu --dev ${SAMPLE}/en_ewt-sample-dev.conllu ${tiny}
             --save ${WORK}/model --parse ${DATA}/unannotated.conllu --out ${WORK}/in_memory.conllu)
  check_output(${WORK}/in_memory.conllu ${DATA}/unannotated.conllu)
elseif(STEP STREQUAL "roundtrip")
  expect_in_memory_parse(${WORK}/model loaded.conllu)
  check_output(${WORK}/loaded.conllu ${DATA}/unannotated.conllu)
  # Version 2's manifest: the fixed loss and decoder names, no projective key.
  copy_model(v2)
  file(READ ${WORK}/model/manifest.txt manifest)
  foreach(pair "version 3\n|version 2\n" "loss local\n|loss cross_entropy_heads+cross_entropy_labels\n"
               "decoder mst\n|decoder mst\n" "projective 0\n|")
    string(REPLACE "|" ";" pair "${pair}")
    list(GET pair 0 from)
    list(LENGTH pair parts)
    set(to "")
    if(parts EQUAL 2)
      list(GET pair 1 to)
    endif()
    string(FIND "${manifest}" "${from}" at)
    if(at EQUAL -1)
      message(FATAL_ERROR "the saved manifest has no line '${from}':\n${manifest}")
    endif()
    string(REPLACE "${from}" "${to}" manifest "${manifest}")
  endforeach()
  file(WRITE ${WORK}/v2/manifest.txt "${manifest}")
  expect_in_memory_parse(${WORK}/v2 loaded_v2.conllu)
elseif(STEP STREQUAL "text")
  file(REMOVE ${WORK}/text.conllu)
  run_parser(0 err --model ${WORK}/model --parse ${DATA}/plain_text.txt --out ${WORK}/text.conllu)
  check_output(${WORK}/text.conllu ${DATA}/plain_text.txt)
elseif(STEP STREQUAL "damaged")
  copy_model(missing)
  file(REMOVE ${WORK}/missing/encoder/conv_1.npy)
  expect_load_error(${WORK}/missing "missing/encoder/conv_1.npy" "cannot open")

  copy_model(no_manifest)
  file(REMOVE ${WORK}/no_manifest/manifest.txt)
  expect_load_error(${WORK}/no_manifest "no_manifest/manifest.txt" "cannot open")

  copy_model(shape)
  file(COPY_FILE ${WORK}/model/encoder/bias_0.npy ${WORK}/shape/encoder/conv_0.npy)
  expect_load_error(${WORK}/shape "shape/encoder/conv_0.npy" "holds shape \\[1, 16\\], expected \\[48, 16\\]")

  copy_model(version)
  file(READ ${WORK}/model/manifest.txt manifest)
  string(REPLACE "version 3\n" "version 4\n" manifest "${manifest}")
  file(WRITE ${WORK}/version/manifest.txt "${manifest}")
  expect_load_error(${WORK}/version "version/manifest.txt" "version '4', this program reads version 2 or 3")

  # Version 3 names its decoder: another word is refused, naming the key.
  copy_model(decoder)
  file(READ ${WORK}/model/manifest.txt manifest)
  string(REPLACE "decoder mst\n" "decoder viterbi\n" manifest "${manifest}")
  file(WRITE ${WORK}/decoder/manifest.txt "${manifest}")
  expect_load_error(${WORK}/decoder "decoder/manifest.txt" "decoder 'viterbi', expected mst or mbr")

  # One relation fewer than the label scorer was trained for: its shapes no longer fit.
  copy_model(labels)
  file(STRINGS ${WORK}/model/labels.txt labels)
  list(REMOVE_AT labels -1)
  list(JOIN labels "\n" labels)
  file(WRITE ${WORK}/labels/labels.txt "${labels}\n")
  expect_load_error(${WORK}/labels "labels/label/[a-z_]+\\.npy" "holds shape")

  # Text without a tree is parsed (--parse), not scored (--dev).
  run_parser(2 err --model ${WORK}/model --dev ${DATA}/unannotated.conllu)
  if(NOT err MATCHES "unannotated.conllu:1: --dev is scored")
    message(FATAL_ERROR "an unannotated --dev should be named with its line, the error says:\n${err}")
  endif()
  file(WRITE ${WORK}/bad.conllu "1\tword\t_\t_\t_\t_\t_\t_\t_\n\n")
  run_parser(2 err --model ${WORK}/model --parse ${WORK}/bad.conllu --out ${WORK}/never.conllu)
  if(NOT err MATCHES "bad.conllu:1: expected 10 tab-separated columns")
    message(FATAL_ERROR "a malformed --parse file should be named with its line, the error says:\n${err}")
  endif()
else()
  message(FATAL_ERROR "saved_parser.cmake: unknown STEP '${STEP}'")
endif()
