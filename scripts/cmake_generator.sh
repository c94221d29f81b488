# Sourced by the build scripts (test.sh, ci_*.sh, fuzz.sh), not run.
# cmake_generator DIR: sets the array `gen` to (-G Ninja) when DIR is a new
# build folder and Ninja is installed (install_deps.sh installs it); an
# existing folder keeps the generator it was made with.
cmake_generator() {
  gen=()
  if [ ! -f "$1/CMakeCache.txt" ] && command -v ninja >/dev/null; then gen=(-G Ninja); fi
}
# keep_going DIR: the build tool's flag to keep going after a failing target
# (one run reports every warning).
keep_going() {
  if [ -f "$1/build.ninja" ]; then echo "-k 0"; else echo "-k"; fi
}
