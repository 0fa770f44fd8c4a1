# Sourced by the benchmarks that summarise rounds with awk: median_awk is
# an awk function, median(s), the median of the numbers in the
# space-separated string s. Put it in front of a program:
#   awk "$median_awk"' { ... median(x) ... }'
median_awk='
function median(s,   k, i, j, t, a) {
  k = split(s, a, " ")
  for (i = 2; i <= k; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > t + 0; j--) a[j + 1] = a[j]; a[j + 1] = t }
  return (k % 2) ? a[(k + 1) / 2] : (a[k / 2] + a[k / 2 + 1]) / 2
}'
