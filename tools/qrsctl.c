/* qrsctl: the qrs operator CLI (work in progress). */
int
main(void)
{
  return 0;
}
